#include "models/schedulers/scheduler.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched {

std::vector<float> apply_step(const StepCoefficients& c, const std::vector<float>& model_output,
                              const std::vector<float>& sample, const std::vector<const std::vector<float>*>& history,
                              std::vector<float>* x0_out, const std::vector<float>* noise) {
    const size_t n = sample.size();
    KILN_CHECK(model_output.size() == n, "scheduler step: model_output has ", model_output.size(),
               " elements, sample has ", n);
    KILN_CHECK((int)history.size() >= c.history_used, "scheduler step: needs ", c.history_used,
               " previous model outputs, got ", history.size());
    for (int k = 0; k < c.history_used; ++k)
        KILN_CHECK(history[(size_t)k] && history[(size_t)k]->size() == n, "scheduler step: history[", k,
                   "] has the wrong size");
    KILN_CHECK(c.prev_noise == 0 || (noise && noise->size() == n), "scheduler step: needs the step's noise (", n,
               " values), got ", noise ? noise->size() : 0);
    const float pn = (float)c.prev_noise;
    const float* nz = c.prev_noise != 0 ? noise->data() : nullptr;
    const float xs = (float)c.x0_sample, xm = (float)c.x0_model, clip = (float)c.x0_clip;
    const float ps = (float)c.prev_sample, pm = (float)c.prev_model, px = (float)c.prev_x0;
    const float h0 = (float)c.prev_history[0], h1 = (float)c.prev_history[1];
    const float* hist0 = c.history_used > 0 ? history[0]->data() : nullptr;
    const float* hist1 = c.history_used > 1 ? history[1]->data() : nullptr;
    const bool want_x0 = c.needs_x0() || x0_out;
    if (x0_out) x0_out->resize(n);
    std::vector<float> prev(n);
    for (size_t i = 0; i < n; ++i) {
        const float s = sample[i], m = model_output[i];
        float x0 = 0;
        if (want_x0) {
            x0 = xs * s + xm * m;
            if (clip > 0) x0 = std::clamp(x0, -clip, clip);
            if (x0_out) (*x0_out)[i] = x0;
        }
        float p = ps * s + pm * m + px * x0;
        if (hist0) p += h0 * hist0[i];
        if (hist1) p += h1 * hist1[i];
        if (nz) p += pn * nz[i];
        prev[i] = p;
    }
    return prev;
}

void Scheduler::set_sigmas(const std::vector<double>&, std::optional<double>) {
    KILN_FAIL(name_, ": custom sigmas are not supported (FlowMatchEulerDiscreteScheduler and EulerDiscreteScheduler ",
              "take them)");
}

void Scheduler::set_custom_timesteps(const std::vector<double>&) {
    KILN_FAIL(name_, ": custom timesteps are not supported (DPMSolverMultistepScheduler and EulerDiscreteScheduler ",
              "take them)");
}

void Scheduler::check_custom_timesteps(const std::vector<double>& t, bool integers) const {
    KILN_CHECK(!t.empty(), name_, ": set_timesteps(timesteps=...) needs at least one timestep");
    const double N = (double)num_train_timesteps_;
    for (size_t i = 0; i < t.size(); ++i) {
        KILN_CHECK(std::isfinite(t[i]) && t[i] >= 0 && t[i] <= N - 1, name_, ": timesteps[", i, "] is ", t[i],
                   ": custom timesteps lie in [0, ", N - 1, "] (num_train_timesteps ", num_train_timesteps_, ")");
        KILN_CHECK(!integers || t[i] == std::floor(t[i]), name_, ": timesteps[", i, "] is ", t[i],
                   ": this scheduler's timesteps are integers");
        KILN_CHECK(i == 0 || t[i] < t[i - 1], name_, ": timesteps[", i, "] = ", t[i], " after ", t[i - 1],
                   ": custom timesteps must decrease strictly");
    }
}

void Scheduler::scale_model_input(std::vector<float>& x, int step_index) const {
    const float d = model_input_divisor(step_index);
    if (d == 1.0f) return;
    for (float& v : x) v = v / d;
}

void Scheduler::set_begin_index(int n) {
    KILN_CHECK(n >= 0 && n < (int)timesteps_.size(), name_, ": begin index ", n, " of ", timesteps_.size(), " steps");
    KILN_CHECK(sigmas_.size() == timesteps_.size() + 1, name_,
               ": set_begin_index needs a sigma per step and a final one");
    timesteps_.erase(timesteps_.begin(), timesteps_.begin() + n);
    sigmas_.erase(sigmas_.begin(), sigmas_.begin() + n);
    last_step_ = -1;
}

void Scheduler::check_step_index(int step_index) {
    KILN_CHECK(!timesteps_.empty(), name_, ": step before set_timesteps");
    KILN_CHECK(step_index >= 0 && step_index < (int)timesteps_.size(), name_, ": step index ", step_index,
               " out of range [0, ", timesteps_.size(), ")");
    KILN_CHECK(last_step_ < 0 || step_index == last_step_ + 1, name_, ": steps must run in order: step ", step_index,
               " after step ", last_step_, " (call set_timesteps to restart)");
    last_step_ = step_index;
}

void Scheduler::reset_state() {
    last_step_ = -1;
    history_.clear();
}

void Scheduler::set_eta(double eta) { KILN_CHECK(eta == 0, name_, ": eta ", eta, " applies to DDIMScheduler only"); }

std::vector<float> Scheduler::step(const std::vector<float>& model_output, int step_index,
                                   const std::vector<float>& sample, const std::vector<float>* noise) {
    KILN_CHECK(!draws_noise() || (noise && noise->size() == sample.size()), name_, ": step ", step_index,
               " needs the step's noise (", sample.size(), " values)");
    const StepCoefficients c = plan_step(step_index);
    std::vector<const std::vector<float>*> hist;
    for (const auto& h : history_) hist.push_back(&h);
    std::vector<float> x0;
    std::vector<float> prev =
        apply_step(c, model_output, sample, hist, c.history_keep > 0 ? &x0 : nullptr, draws_noise() ? noise : nullptr);
    if (c.history_keep > 0) {
        history_.insert(history_.begin(), std::move(x0));
        history_.resize(std::min(history_.size(), (size_t)c.history_keep));
    }
    return prev;
}

// ---------------------------------------------------------------- factory

namespace {
struct Entry {
    const char* cls;
    std::unique_ptr<Scheduler> (*make)(const detail::Config&);
};
const Entry kEntries[] = {
    {"DDIMScheduler", detail::make_ddim},
    {"DPMSolverMultistepScheduler", detail::make_dpm_solver},
    {"EulerDiscreteScheduler", detail::make_euler},
    {"EulerAncestralDiscreteScheduler", detail::make_euler_ancestral},
    {"FlowMatchEulerDiscreteScheduler", detail::make_flow_match_euler},
    {"SCMScheduler", detail::make_scm},
};
const std::pair<const char*, const char*> kAliases[] = {
    {"ddim", "DDIMScheduler"},
    {"dpm", "DPMSolverMultistepScheduler"},
    {"dpm++", "DPMSolverMultistepScheduler"},
    {"dpmpp", "DPMSolverMultistepScheduler"},
    {"dpm++2m", "DPMSolverMultistepScheduler"},
    {"euler", "EulerDiscreteScheduler"},
    {"euler_a", "EulerAncestralDiscreteScheduler"},
    {"euler-ancestral", "EulerAncestralDiscreteScheduler"},
    {"flow_match_euler", "FlowMatchEulerDiscreteScheduler"},
    {"flowmatch", "FlowMatchEulerDiscreteScheduler"},
};
// The sampler names of other front ends for a class and config fields (as from_config(config, **fields)).
struct Preset {
    const char* name;
    const char* cls;
    const char* fields;  // JSON object
};
const Preset kPresets[] = {
    {"dpm++2m-karras", "DPMSolverMultistepScheduler", R"({"use_karras_sigmas": true})"},
    {"dpm++2m-sde", "DPMSolverMultistepScheduler", R"({"algorithm_type": "sde-dpmsolver++"})"},
    {"dpm++2m-sde-karras", "DPMSolverMultistepScheduler",
     R"({"algorithm_type": "sde-dpmsolver++", "use_karras_sigmas": true})"},
    {"euler-karras", "EulerDiscreteScheduler", R"({"use_karras_sigmas": true})"},
};
}  // namespace

std::vector<std::string> supported_schedulers() {
    std::vector<std::string> out;
    for (const auto& e : kEntries) out.push_back(e.cls);
    for (const auto& a : kAliases) out.push_back(a.first);
    for (const auto& p : kPresets) out.push_back(p.name);
    return out;
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& class_override) {
    return make_scheduler(config, class_override, nlohmann::json::object());
}

nlohmann::json with_overrides(const nlohmann::json& config, const nlohmann::json& overrides) {
    KILN_CHECK(config.is_object(), "scheduler config must be a JSON object");
    if (overrides.is_null()) return config;
    KILN_CHECK(overrides.is_object(), "scheduler config overrides must be a JSON object, got ", overrides.dump());
    nlohmann::json merged = config;
    for (const auto& [key, value] : overrides.items()) {
        KILN_CHECK(key.empty() || key[0] != '_', "scheduler config override '", key,
                   "': not a scheduler field (choose the class with the scheduler name)");
        merged[key] = value;
    }
    return merged;
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& class_override,
                                          const nlohmann::json& overrides) {
    std::string cls = class_override;
    if (cls.empty()) {
        KILN_CHECK(config.is_object(), "scheduler config must be a JSON object");
        auto it = config.find("_class_name");
        KILN_CHECK(it != config.end() && it->is_string(),
                   "scheduler config: field '_class_name' missing or not a string");
        cls = it->get<std::string>();
    }
    const std::string asked = cls;
    for (const auto& a : kAliases)
        if (cls == a.first) cls = a.second;
    for (const auto& p : kPresets)
        if (cls == p.name)  // the preset's fields, then the caller's on top
            return make_scheduler(config, p.cls, with_overrides(nlohmann::json::parse(p.fields), overrides));
    const Entry* entry = nullptr;
    for (const auto& e : kEntries)
        if (cls == e.cls) entry = &e;
    if (!entry) {
        std::string list;
        for (const auto& s : supported_schedulers()) list += (list.empty() ? "" : ", ") + s;
        KILN_FAIL("scheduler config: _class_name '", asked, "' is not supported (supported: ", list, ")");
    }
    if (overrides.is_null() || overrides.empty()) return entry->make(detail::Config(config, cls));
    // diffusers' Scheduler.from_config(config, **kwargs): the kwargs replace the config's fields.
    const nlohmann::json merged = with_overrides(config, overrides);
    detail::Config c(merged, cls);
    std::set<std::string> read;
    c.track(&read);
    auto s = entry->make(c);
    for (const auto& [key, value] : overrides.items()) {
        if (read.count(key)) continue;
        std::string fields;
        for (const auto& k : read) fields += (fields.empty() ? "" : ", ") + k;
        KILN_FAIL(cls, ": scheduler config override '", key,
                  "' is not a field this scheduler reads (it reads: ", fields, ")");
    }
    return s;
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config) {
    return make_scheduler(config, "", nlohmann::json::object());
}

nlohmann::json parse_scheduler_config(const std::string& text) {
    // Quote the bare tokens Infinity, -Infinity, NaN that Python's json writes (outside strings only).
    std::string out;
    out.reserve(text.size() + 16);
    bool in_str = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char ch = text[i];
        if (in_str) {
            out += ch;
            if (ch == '\\' && i + 1 < text.size())
                out += text[++i];
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
            out += ch;
            continue;
        }
        bool replaced = false;
        for (const char* tok : {"-Infinity", "Infinity", "NaN"}) {
            const size_t len = std::char_traits<char>::length(tok);
            if (text.compare(i, len, tok) == 0) {
                out += '"';
                out += tok;
                out += '"';
                i += len - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced) out += ch;
    }
    try {
        return nlohmann::json::parse(out);
    } catch (const nlohmann::json::exception& e) {
        KILN_FAIL("scheduler config: invalid JSON: ", e.what());
    }
}

nlohmann::json load_scheduler_config(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    KILN_CHECK(f, "scheduler config: cannot open ", path);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
        return parse_scheduler_config(ss.str());
    } catch (const Error& e) {
        KILN_FAIL(path, ": ", e.what());
    }
}

double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift) {
    KILN_CHECK(max_seq_len != base_seq_len, "calculate_shift: max_seq_len equals base_seq_len (", base_seq_len, ")");
    const double m = (max_shift - base_shift) / (double)(max_seq_len - base_seq_len);
    const double b = base_shift - m * (double)base_seq_len;
    return (double)image_seq_len * m + b;
}

double empirical_mu(int64_t image_seq_len, int num_steps) {
    const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
    const double seq = (double)image_seq_len;
    if (image_seq_len > 4300) return a2 * seq + b2;
    const double m_200 = a2 * seq + b2, m_10 = a1 * seq + b1;
    const double a = (m_200 - m_10) / 190.0, b = m_200 - 200.0 * a;
    return a * num_steps + b;
}

}  // namespace kiln::sched
