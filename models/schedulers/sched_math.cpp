#include "models/schedulers/sched_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"

namespace kiln::sched::detail {

double np_round(double x) { return std::nearbyint(x); }  // default rounding mode: to nearest, ties to even

std::vector<double> np_linspace(double start, double stop, int64_t num) {
    KILN_CHECK(num >= 0, "linspace: negative count ", num);
    std::vector<double> y((size_t)num);
    const int64_t div = num - 1;
    const double delta = stop - start;
    if (div > 0) {
        const double step = delta / (double)div;
        for (int64_t i = 0; i < num; ++i)
            y[(size_t)i] = step == 0 ? (double)i / (double)div * delta + start : (double)i * step + start;
        y[(size_t)num - 1] = stop;
    } else {
        for (int64_t i = 0; i < num; ++i) y[(size_t)i] = (double)i * delta + start;
    }
    return y;
}

std::vector<double> np_arange(double start, double stop, double step) {
    KILN_CHECK(step != 0, "arange: zero step");
    const double len_f = std::ceil((stop - start) / step);
    const int64_t len = len_f > 0 ? (int64_t)len_f : 0;
    std::vector<double> y((size_t)len);
    if (len == 0) return y;
    y[0] = start;
    // numpy fills element 1 as start+step, then start + i*delta with delta = y[1] - y[0].
    const double delta = (start + step) - start;
    for (int64_t i = 1; i < len; ++i) y[(size_t)i] = start + (double)i * delta;
    return y;
}

double np_interp(double x, const std::vector<float>& fp) {
    const int64_t n = (int64_t)fp.size();
    KILN_CHECK(n > 0, "interp: empty table");
    if (x > (double)(n - 1)) return fp[(size_t)n - 1];
    if (x < 0) return fp[0];
    const int64_t j = std::min<int64_t>((int64_t)std::floor(x), n - 1);
    if (j == n - 1 || (double)j == x) return fp[(size_t)j];
    const double slope = ((double)fp[(size_t)j + 1] - (double)fp[(size_t)j]) / 1.0;
    double r = slope * (x - (double)j) + (double)fp[(size_t)j];
    if (std::isnan(r)) r = slope * (x - (double)(j + 1)) + (double)fp[(size_t)j + 1];
    return r;
}

// ATen's CPU linspace for float32 (x86 AVX2 build, the one diffusers' fixtures come from): step = (end - start) /
// (steps - 1) in float; the first half counts up from start, the second half down from end, both compiled to fused
// multiply-adds. The kernel is vectorised: a block of 8 lanes starting at idx is arange(base(idx), step) =
// base + k*step (also fused), base taken from the half the block start lies in; blocks cover the largest multiple
// of 16 (two vectors per loop iteration), the tail is scalar. Verified bit-exact against diffusers' alphas_cumprod
// for linear and scaled_linear betas.
std::vector<float> torch_linspace_f32(double start_d, double end_d, int64_t steps) {
    KILN_CHECK(steps >= 1, "linspace: steps must be >= 1, got ", steps);
    std::vector<float> y((size_t)steps);
    const float start = (float)start_d, end = (float)end_d;
    if (steps == 1) {
        y[0] = start;
        return y;
    }
    const float step = (end - start) / (float)(steps - 1);
    const int64_t halfway = steps / 2;
    auto base = [&](int64_t idx) -> float {
        return idx < halfway ? std::fma(step, (float)idx, start) : std::fma(-step, (float)(steps - idx - 1), end);
    };
    constexpr int64_t lanes = 8;
    const int64_t vec_end = steps - steps % (2 * lanes);
    for (int64_t b = 0; b < vec_end; b += lanes) {
        const float b0 = base(b);
        for (int64_t k = 0; k < lanes; ++k) y[(size_t)(b + k)] = std::fma((float)k, step, b0);
    }
    for (int64_t i = vec_end; i < steps; ++i) y[(size_t)i] = base(i);
    return y;
}

std::vector<float> torch_cumprod_f32(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    double acc = 1.0;
    for (size_t i = 0; i < x.size(); ++i) {
        acc *= (double)x[i];
        y[i] = (float)acc;
    }
    return y;
}

std::vector<float> euler_timesteps(const std::string& spacing, int64_t N, int n, int64_t steps_offset) {
    std::vector<float> t;  // numpy float32
    if (spacing == "linspace") {
        const std::vector<double> v = np_linspace(0, (double)(N - 1), n);
        for (auto it = v.rbegin(); it != v.rend(); ++it) t.push_back((float)*it);
    } else if (spacing == "leading") {
        const int64_t ratio = N / n;
        for (int64_t i = n - 1; i >= 0; --i) t.push_back((float)(i * ratio) + (float)steps_offset);
    } else {
        for (double v : np_arange((double)N, 0, -((double)N / (double)n))) t.push_back((float)np_round(v) - 1.0f);
    }
    return t;
}

double euler_init_noise_sigma(const std::vector<double>& sigmas, const std::string& spacing) {
    float mx = 0;
    for (double s : sigmas) mx = std::max(mx, (float)s);
    if (spacing == "linspace" || spacing == "trailing") return mx;
    return std::sqrt(mx * mx + 1.0f);
}

std::vector<float> vp_sigmas(const std::vector<float>& alphas_cumprod) {
    std::vector<float> s(alphas_cumprod.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::sqrt((1.0f - alphas_cumprod[i]) / alphas_cumprod[i]);
    return s;
}

std::vector<double> euler_initial_sigmas(const std::vector<float>& train_sigmas) {
    std::vector<double> s(train_sigmas.rbegin(), train_sigmas.rend());
    s.push_back(0.0);
    return s;
}

float euler_input_divisor(const std::vector<double>& sigmas, int i, const std::string& who) {
    KILN_CHECK(i >= 0 && i + 1 < (int)sigmas.size(), who, ": step index ", i, " out of range");
    const float s = (float)sigmas[(size_t)i];
    return std::sqrt(s * s + 1.0f);
}

namespace {
// _sigma_to_t from log(sigma) as the float32 that meets the float32 log_sigmas array.
double log_sigma_to_t(float ls, const std::vector<float>& log_sigmas) {
    const int64_t n = (int64_t)log_sigmas.size();
    KILN_CHECK(n >= 2, "sigma_to_t: need at least 2 training sigmas");
    int64_t low = 0;  // argmax of cumsum(dists >= 0): the last index with dists >= 0 (else 0)
    for (int64_t i = 0; i < n; ++i)
        if (ls - log_sigmas[(size_t)i] >= 0.0f) low = i;
    low = std::min(low, n - 2);
    const int64_t high = low + 1;
    const float lo = log_sigmas[(size_t)low], hi = log_sigmas[(size_t)high];
    float w = (lo - ls) / (lo - hi);
    w = std::clamp(w, 0.0f, 1.0f);
    return (double)(1.0f - w) * (double)low + (double)w * (double)high;
}
}  // namespace

double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
    // float32 array op with a float64 scalar: the scalar is cast to float32
    return log_sigma_to_t((float)std::log(std::max(sigma, 1e-10)), log_sigmas);
}

double sigma_to_t_f32(float sigma, const std::vector<float>& log_sigmas) {
    return log_sigma_to_t(std::log(std::max(sigma, 1e-10f)), log_sigmas);
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t n) {
    const double rho = 7.0;
    const std::vector<double> ramp = np_linspace(0, 1, n);
    const double min_inv = std::pow(sigma_min, 1 / rho), max_inv = std::pow(sigma_max, 1 / rho);
    std::vector<double> s(ramp.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::pow(max_inv + ramp[i] * (min_inv - max_inv), rho);
    return s;
}

std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, int64_t n) {
    std::vector<double> s = np_linspace(std::log(sigma_max), std::log(sigma_min), n);
    for (double& v : s) v = std::exp(v);
    return s;
}

// ---------------------------------------------------------------- Config

Config::Config(const nlohmann::json& j, std::string cls) : j_(j), cls_(std::move(cls)) {
    KILN_CHECK(j.is_object(), cls_, ": scheduler config must be a JSON object");
}

const nlohmann::json* Config::find(const std::string& key) const {
    if (read_) read_->insert(key);
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
}

bool Config::has(const std::string& key) const { return find(key) != nullptr; }

bool Config::has_null(const std::string& key) const {
    (void)find(key);  // recorded as read
    auto it = j_.find(key);
    return it != j_.end() && it->is_null();
}

std::string Config::value_str(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? std::string("<absent>") : it->dump();
}

void Config::reject(const std::string& key, const std::string& why) const {
    KILN_FAIL(cls_, ": config field '", key, "' = ", value_str(key), ": ", why);
}

bool Config::boolean(const std::string& key, bool def) const {
    const auto* v = find(key);
    if (!v) return def;
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1)) return v->get<int64_t>() == 1;
    reject(key, "expected true or false");
}

int64_t Config::integer(const std::string& key, int64_t def) const {
    const auto* v = find(key);
    if (!v) return def;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
        const double d = v->get<double>();
        if (std::floor(d) == d && std::fabs(d) < 9e15) return (int64_t)d;
    }
    reject(key, "expected an integer");
}

static std::optional<double> as_number(const nlohmann::json& v) {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {  // non-standard JSON tokens, kept as strings by parse_scheduler_config
        const auto& s = v.get_ref<const std::string&>();
        if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
        if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
        if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    return std::nullopt;
}

double Config::number(const std::string& key, double def) const {
    const auto* v = find(key);
    if (!v) return def;
    if (auto d = as_number(*v)) return *d;
    reject(key, "expected a number");
}

std::optional<double> Config::opt_number(const std::string& key) const {
    const auto* v = find(key);
    if (!v) return std::nullopt;
    if (auto d = as_number(*v)) return *d;
    reject(key, "expected a number or null");
}

std::string Config::string(const std::string& key, const std::string& def) const {
    const auto* v = find(key);
    if (!v) return def;
    if (v->is_string()) return v->get<std::string>();
    reject(key, "expected a string");
}

std::optional<std::vector<double>> Config::number_list(const std::string& key) const {
    const auto* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) reject(key, "expected a list of numbers or null");
    std::vector<double> out;
    for (const auto& e : *v) {
        auto d = as_number(e);
        if (!d) reject(key, "expected a list of numbers or null");
        out.push_back(*d);
    }
    return out;
}

std::string Config::choice(const std::string& key, const std::string& def,
                           const std::set<std::string>& accepted) const {
    const std::string s = string(key, def);
    if (accepted.count(s)) return s;
    std::string list;
    for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
    reject(key, "not supported (supported: " + list + ")");
}

// ---------------------------------------------------------------- training schedule

// diffusers' betas_for_alpha_bar(cosine): float64 in Python, then a float32 tensor.
static std::vector<float> betas_cosine(int64_t n) {
    auto alpha_bar = [](double t) {
        const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2);
        return c * c;
    };
    std::vector<float> b((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
        const double t1 = (double)i / (double)n, t2 = (double)(i + 1) / (double)n;
        b[(size_t)i] = (float)std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999);
    }
    return b;
}

// rescale_zero_terminal_snr, in torch float32 ops.
static std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas) {
    const size_t n = betas.size();
    std::vector<float> alphas(n);
    for (size_t i = 0; i < n; ++i) alphas[i] = 1.0f - betas[i];
    std::vector<float> s = torch_cumprod_f32(alphas);
    for (float& v : s) v = std::sqrt(v);
    const float s0 = s[0], sT = s[n - 1];
    const float scale = s0 / (s0 - sT);
    for (float& v : s) v = (v - sT) * scale;
    std::vector<float> bar(n), out(n);
    for (size_t i = 0; i < n; ++i) bar[i] = s[i] * s[i];
    for (size_t i = 0; i < n; ++i) out[i] = 1.0f - (i == 0 ? bar[0] : bar[i] / bar[i - 1]);
    return out;
}

TrainSchedule make_train_schedule(const Config& c) {
    TrainSchedule t;
    t.num_train_timesteps = c.integer("num_train_timesteps", 1000);
    if (t.num_train_timesteps < 2) c.reject("num_train_timesteps", "must be at least 2");
    const int64_t n = t.num_train_timesteps;
    const double beta_start = c.number("beta_start", 0.0001), beta_end = c.number("beta_end", 0.02);
    if (auto tb = c.number_list("trained_betas")) {
        if ((int64_t)tb->size() != n)
            c.reject("trained_betas",
                     "has " + std::to_string(tb->size()) + " values, num_train_timesteps is " + std::to_string(n));
        for (double b : *tb) t.betas.push_back((float)b);
    } else {
        const std::string sched = c.choice("beta_schedule", "linear", {"linear", "scaled_linear", "squaredcos_cap_v2"});
        if (sched == "linear") {
            t.betas = torch_linspace_f32(beta_start, beta_end, n);
        } else if (sched == "scaled_linear") {
            t.betas = torch_linspace_f32(std::pow(beta_start, 0.5), std::pow(beta_end, 0.5), n);
            for (float& b : t.betas) b = b * b;
        } else {
            t.betas = betas_cosine(n);
        }
    }
    if (c.boolean("rescale_betas_zero_snr", false)) t.betas = rescale_zero_terminal_snr(t.betas);
    std::vector<float> alphas(t.betas.size());
    for (size_t i = 0; i < alphas.size(); ++i) alphas[i] = 1.0f - t.betas[i];
    t.alphas_cumprod = torch_cumprod_f32(alphas);
    return t;
}

}  // namespace kiln::sched::detail
