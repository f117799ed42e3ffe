#include "models/core/weights.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "models/layouts/layouts.h"
#include "models/layouts/lora.h"
#include "runtime/core/error.h"
#include "runtime/core/file_io.h"
#include "runtime/core/gguf.h"
#include "runtime/core/quant.h"

namespace kiln::models {

namespace fs = std::filesystem;

namespace {
// Any TensorSet (a diffusers component's safetensors, or a single file in another layout, models/layouts) as a store.
class SetStore : public WeightStore {
public:
    explicit SetStore(std::unique_ptr<layouts::TensorSet> set) : set_(std::move(set)) {
        for (auto& t : set_->tensors()) meta_[t.name] = {t.shape, t.dtype};
    }
    const TensorMeta* find(const std::string& name) const override {
        auto it = meta_.find(name);
        return it == meta_.end() ? nullptr : &it->second;
    }
    Tensor read(const std::string& name) const override { return set_->read(name); }
    exec::HostBytes view(const std::string& name) const override {
        layouts::Mapped m = set_->view(name);
        return {m.file, m.offset};
    }
    std::string source() const override { return set_->source(); }

private:
    std::unique_ptr<layouts::TensorSet> set_;
    std::map<std::string, TensorMeta> meta_;
};

}  // namespace

namespace {
class SyntheticStore : public WeightStore {
public:
    SyntheticStore(DType t, uint64_t seed) : dtype_(t), seed_(seed) {}
    const TensorMeta* find(const std::string& name) const override {
        auto it = meta_.find(name);
        return it == meta_.end() ? nullptr : &it->second;
    }
    const TensorMeta* lookup(const std::string& name, const Shape& shape) const override {
        auto it = meta_.find(name);
        if (it == meta_.end())
            it = meta_
                     .emplace(name, TensorMeta{shape, shape.size() < 2         ? DType::f32
                                                      : dtype_is_quant(dtype_) ? quant_storage(dtype_, name, shape)
                                                                               : dtype_})
                     .first;
        return &it->second;
    }
    Tensor read(const std::string& name) const override {
        const TensorMeta& m = meta_.at(name);
        uint64_t h = seed_ ^ 1469598103934665603ull;
        for (char c : name) h = (h ^ (uint8_t)c) * 1099511628211ull;
        Tensor t(DType::f32, m.shape);
        double fan_in = m.shape.size() >= 2 ? (double)shape_numel(m.shape) / (double)m.shape[0] : 1.0;
        float sc = m.shape.size() >= 2 ? (float)(1.0 / std::sqrt(fan_in)) : 0.05f;
        float* p = t.data<float>();
        for (int64_t i = 0, n = t.numel(); i < n; ++i) {  // xorshift64*: cheap and deterministic
            h ^= h >> 12, h ^= h << 25, h ^= h >> 27;
            p[i] = sc * ((float)((h * 2685821657736338717ull) >> 40) / (float)(1ull << 24) * 2.f - 1.f);
        }
        return t.astype(m.dtype);
    }
    std::string source() const override { return "synthetic weights"; }

private:
    DType dtype_;
    uint64_t seed_;
    mutable std::map<std::string, TensorMeta> meta_;
};
}  // namespace

std::unique_ptr<WeightStore> synthetic_store(DType matrix_dtype, uint64_t seed) {
    return std::make_unique<SyntheticStore>(matrix_dtype, seed);
}

std::unique_ptr<WeightStore> open_diffusers_component(const std::string& dir) {
    fs::path d(dir);
    KILN_CHECK(fs::is_directory(d), dir, ": not a directory");
    for (const char* name :
         {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.safetensors.index.json",
          "diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.safetensors.index.fp16.json",
          "model.safetensors", "model.safetensors.index.json"})
        if (fs::exists(d / name)) return set_store(layouts::open_safetensors((d / name).string()));
    KILN_FAIL(dir, ": no diffusion_pytorch_model*.safetensors found");
}

std::unique_ptr<WeightStore> set_store(std::unique_ptr<layouts::TensorSet> set) {
    return std::make_unique<SetStore>(std::move(set));
}

std::unique_ptr<WeightStore> open_kiln_component(const std::string& file, const std::string& component) {
    return set_store(layouts::open_kiln_component(file, component));
}

const TensorMeta& Builder::meta(const std::string& name, const Shape& shape) const {
    const TensorMeta* m = ws_.lookup(name, shape);
    KILN_CHECK(m, ws_.source(), ": missing tensor '", name, "'");
    KILN_CHECK(m->shape == shape, ws_.source(), ": tensor '", name, "' has shape ", shape_str(m->shape),
               ", the config implies ", shape_str(shape));
    return *m;
}

namespace {
bool is_f8(DType t) { return t == DType::f8_e4m3 || t == DType::f8_e5m2; }
}  // namespace

ir::Val Builder::matrix(const std::string& name, const Shape& shape) {
    DType t = meta(name, shape).dtype;
    KILN_CHECK(t == DType::f32 || t == DType::f16 || t == DType::bf16 || dtype_is_quant(t) || is_f8(t), ws_.source(),
               ": tensor '", name, "' has dtype ", dtype_name(t), "; weights must be f32, f16, bf16, fp8 or quantized");
    // fp8 is upcast at load: both formats are subsets of f16, so the device reads the exact values as f16
    // (weight_fn converts the stored bytes to the declared dtype).
    return g_.weight(name, shape, is_f8(t) ? DType::f16 : t);
}

ir::Val Builder::matrix_1x1(const std::string& name, int64_t O, int64_t C) {
    // diffusers stores [O, C, 1, 1]; kiln-convert stores [O, C] (ArchSpec::matrices_1x1), quantized like a linear's.
    // Both are the same row-major bytes; a store that has no such tensor yet (synthetic) makes the converter's form.
    const TensorMeta* m = ws_.find(name);
    const DType t = meta(name, m && m->shape.size() == 4 ? Shape{O, C, 1, 1} : Shape{O, C}).dtype;
    KILN_CHECK(t == DType::f32 || t == DType::f16 || t == DType::bf16 || dtype_is_quant(t) || is_f8(t), ws_.source(),
               ": tensor '", name, "' has dtype ", dtype_name(t), "; weights must be f32, f16, bf16, fp8 or quantized");
    return g_.weight(name, {O, C}, is_f8(t) ? DType::f16 : t);
}

ir::Val Builder::vec(const std::string& name, const Shape& shape) {
    meta(name, shape);
    return g_.weight(name, shape, DType::f32);
}

ir::Val Builder::opt_vec(const std::string& name, const Shape& shape) {
    return ws_.find(name) ? vec(name, shape) : ir::Val{};
}

ir::Val Builder::constant(const std::string& name, Tensor t) {
    KILN_CHECK(t.dtype == DType::f32, "constant '", name, "' must be f32");
    Shape s = t.shape;
    consts_[name] = std::move(t);
    return g_.weight(name, s, DType::f32);
}

Tensor Builder::read_f32(const std::string& name, const Shape& shape) const {
    meta(name, shape);
    return ws_.read(name).astype(DType::f32);
}

Tensor Builder::gather_rows(const std::string& name, const Shape& shape, const Tensor& ids) const {
    KILN_CHECK(shape.size() == 2 && ids.dtype == DType::i32, "gather_rows '", name, "': needs [V, D] and i32 ids");
    const DType t = meta(name, shape).dtype;
    KILN_CHECK(t == DType::f32 || t == DType::f16 || t == DType::bf16 || dtype_is_quant(t) || is_f8(t), ws_.source(),
               ": tensor '", name, "' has dtype ", dtype_name(t), "; weights must be f32, f16, bf16, fp8 or quantized");
    const int64_t V = shape[0], D = shape[1], N = ids.numel();
    const size_t row = dtype_nbytes(t, D);  // quantized: rows are whole blocks
    // A mapped table is read row by row in place (Gemma-2's is 1.2 GB at bf16); otherwise it is read whole.
    const exec::HostBytes mapped = ws_.view(name);
    Tensor table;
    if (!mapped.file) {
        table = ws_.read(name);
        KILN_CHECK(table.dtype == t && table.numel() == shape_numel(shape), ws_.source(), ": tensor '", name,
                   "' read back with another dtype or size");
    }
    std::vector<uint8_t> buf(mapped.file ? row : 0);
    Tensor out(DType::f32, {N, D});
    for (int64_t i = 0; i < N; ++i) {
        const int64_t id = ids.data<int32_t>()[i];
        KILN_CHECK(id >= 0 && id < V, "token id ", id, " is out of range of '", name, "' (", V, " rows)");
        const uint8_t* src = table.bytes.data() + (size_t)id * row;
        if (mapped.file) {
            mapped.file->read(buf.data(), row, mapped.offset + (uint64_t)id * row);
            src = buf.data();
        }
        convert(src, t, out.data<float>() + i * D, DType::f32, (size_t)D);
    }
    return out;
}

exec::WeightBytesFn Builder::weight_fn() const {
    const WeightStore* ws = &ws_;
    const auto* consts = &consts_;
    exec::WeightBytesFn fn = [ws, consts](const ir::Value& v, void* dst, size_t n) {
        auto it = consts->find(v.name);
        Tensor t = it != consts->end() ? it->second : ws->read(v.name);
        KILN_CHECK(dtype_nbytes(v.dtype, t.numel()) == n, "weight '", v.name, "': size mismatch");
        convert(t.bytes.data(), t.dtype, dst, v.dtype, (size_t)t.numel());
    };
    fn.view = [ws, consts](const ir::Value& v) {
        const TensorMeta* m = consts->count(v.name) ? nullptr : ws->find(v.name);
        // In place only where the stored bytes are what the device reads: same dtype and element count.
        if (!m || m->dtype != v.dtype || shape_numel(m->shape) != shape_numel(v.shape)) return exec::HostBytes{};
        return ws->view(v.name);
    };
    return fn;
}

struct LoraSet {
    std::shared_ptr<const std::vector<layouts::LoraFile>> files;  // every component's modules
    std::string component = "transformer";                        // the modules this set applies
    // weight name -> (module, user scale) of every file that targets it
    std::map<std::string, std::vector<std::pair<const layouts::LoraModule*, double>>> terms;
    // The runtime path: per file, weight name -> module; per block-kind name ("transformer_blocks.*.attn.to_q"),
    // each file's largest rank (0: the file does not target it).
    std::vector<std::map<std::string, const layouts::LoraModule*>> by_file;
    std::map<std::string, std::vector<int64_t>> kind_rank;
    std::vector<double> scales;
    bool runtime = false;  // LoraOptions::apply "runtime": Builder::lora_side, no merge
};

namespace {
// "transformer_blocks.3.attn.to_out.0" -> "transformer_blocks.*.attn.to_out.0": the first numeric part is the
// block instance (top-level modules have none).
std::string kind_name(const std::string& module) {
    size_t s = 0;
    while ((s = module.find('.', s)) != std::string::npos) {
        size_t e = s + 1;
        while (e < module.size() && std::isdigit((unsigned char)module[e])) ++e;
        if (e > s + 1 && (e == module.size() || module[e] == '.'))
            return module.substr(0, s + 1) + "*" + module.substr(e);
        s = e;
    }
    return module;
}
}  // namespace

ir::Val Builder::lora_side(const std::string& name, ir::Val x, ir::Val y, int in, int out) {
    if (!loras_) return y;
    auto it = loras_->kind_rank.find(kind_name(name));
    if (it == loras_->kind_rank.end()) return y;
    const std::vector<int64_t>& ranks = it->second;  // each file's rank in this kind (0: not targeted)
    int64_t R = 0;
    for (int64_t r : ranks) R += r;
    // B_cat holds alpha / r x B only: the user's scales are device data (lora_scale_input), so changing them writes
    // a few floats and re-records and re-uploads nothing.
    Tensor A(DType::f32, {R, in}), B(DType::f32, {out, R});
    int64_t off = 0;
    for (size_t f = 0; f < ranks.size(); ++f) {
        auto m = loras_->by_file[f].find(name + ".weight");
        if (m != loras_->by_file[f].end()) {
            const layouts::LoraModule& lm = *m->second;
            const int64_t r = lm.A.shape[0];
            KILN_CHECK(lm.A.shape[1] == in && lm.B.shape[0] == out, "lora ", (*loras_->files)[f].path, ": '", lm.module,
                       "' does not fit the linear [", out, ", ", in, "]");
            std::memcpy(A.data<float>() + off * in, lm.A.data<float>(), lm.A.nbytes());
            const float s = (float)lm.scale;
            for (int64_t o = 0; o < out; ++o)
                for (int64_t k = 0; k < r; ++k) B.data<float>()[o * R + off + k] = s * lm.B.data<float>()[o * r + k];
        }
        off += ranks[f];
    }
    ir::Val a = constant(name + ".lora_A", std::move(A));
    ir::Val b = constant(name + ".lora_B", std::move(B));
    ir::Val h = g_.mul(g_.linear(x, a, ir::Val{}), lora_scale_input(ranks));  // (A_cat x) * s_cat  [.., R]
    return g_.add(y, g_.linear(h, b, ir::Val{}));                             // y + B_cat (s_cat * A_cat x)
}

// One graph input per rank pattern (each file's rank in a kind): s_cat [R], file f's scale over its r_f columns.
// Inputs are not block weights: every instance reads the same buffer, so the block still has one graph.
ir::Val Builder::lora_scale_input(const std::vector<int64_t>& ranks) {
    std::string name = "lora_scales";
    int64_t R = 0;
    for (int64_t r : ranks) name += "." + std::to_string(r), R += r;
    auto it = lora_inputs_.find(name);
    if (it != lora_inputs_.end()) return it->second.val;
    ir::Val v = g_.input(name, {R});
    lora_inputs_[name] = {v, ranks};
    return v;
}

std::map<std::string, Tensor> Builder::lora_scale_values(const std::vector<double>& scales) const {
    std::map<std::string, Tensor> out;
    if (lora_inputs_.empty()) return out;
    KILN_CHECK(scales.size() == loras_->files->size(), "lora scales: ", scales.size(), " given for ",
               loras_->files->size(), " LoRA files");
    for (const auto& [name, in] : lora_inputs_) {
        std::vector<float> v;
        for (size_t f = 0; f < in.ranks.size(); ++f) v.insert(v.end(), (size_t)in.ranks[f], (float)scales[f]);
        out[name] = Tensor::from_f32({(int64_t)v.size()}, v);
    }
    return out;
}

std::map<std::string, Tensor> Builder::lora_scale_values() const {
    return loras_ ? lora_scale_values(loras_->scales) : std::map<std::string, Tensor>{};
}

namespace {
// A store with LoRAs merged into the weights they target, on read (the executor's upload and the CPU reference
// both read through it).
class LoraStore : public WeightStore {
public:
    LoraStore(std::unique_ptr<WeightStore> base, std::shared_ptr<const LoraSet> set)
        : base_(std::move(base)), set_(std::move(set)) {}
    const TensorMeta* find(const std::string& name) const override { return base_->find(name); }
    const TensorMeta* lookup(const std::string& name, const Shape& shape) const override {
        return base_->lookup(name, shape);
    }
    Tensor read(const std::string& name) const override {
        auto it = set_->terms.find(name);
        return it == set_->terms.end() ? base_->read(name) : layouts::lora_merge(base_->read(name), it->second);
    }
    std::string source() const override { return base_->source(); }
    exec::HostBytes view(const std::string& name) const override {
        return set_->terms.count(name) ? exec::HostBytes{} : base_->view(name);
    }

private:
    std::unique_ptr<WeightStore> base_;
    std::shared_ptr<const LoraSet> set_;
};
}  // namespace

namespace {
// The set of `component`'s modules in `files`: terms for merge, per-file modules and per-kind ranks for the side path.
std::shared_ptr<LoraSet> component_set(std::shared_ptr<const std::vector<layouts::LoraFile>> files,
                                       const std::string& component, const std::vector<double>& scales, bool runtime) {
    auto set = std::make_shared<LoraSet>();
    set->files = std::move(files);
    set->component = component;
    set->scales = scales;
    set->runtime = runtime;
    const size_t n = set->files->size();
    set->by_file.resize(n);
    for (size_t i = 0; i < n; ++i)
        for (const layouts::LoraModule& m : (*set->files)[i].modules) {
            if (m.component != component) continue;
            set->terms[m.module + ".weight"].push_back({&m, scales[i]});
            set->by_file[i][m.module + ".weight"] = &m;
            auto& r = set->kind_rank[kind_name(m.module)];
            r.resize(n, 0);
            r[i] = std::max(r[i], m.A.shape[0]);
        }
    return set;
}
}  // namespace

std::shared_ptr<const LoraSet> load_loras(const WeightStore& ws, const std::string& family, const LoraOptions& opt) {
    return load_loras(std::map<std::string, const WeightStore*>{{"transformer", &ws}}, family, opt);
}

std::shared_ptr<const LoraSet> load_loras(const std::map<std::string, const WeightStore*>& components,
                                          const std::string& family, const LoraOptions& opt,
                                          const std::string& absent_why) {
    KILN_CHECK(opt.apply == "merge" || opt.apply == "runtime", "--lora-apply ", opt.apply, ": runtime or merge");
    auto target = [](const WeightStore* ws) {
        return [ws](const std::string& name) -> std::optional<Shape> {
            const TensorMeta* m = ws->find(name);
            return m ? std::optional<Shape>(m->shape) : std::nullopt;
        };
    };
    layouts::LoraTargets targets;
    targets.absent_why = absent_why;
    for (const auto& [c, ws] : components)
        if (c == "transformer")
            targets.transformer = target(ws);
        else
            targets.text_encoders[c] = target(ws);
    KILN_CHECK(targets.transformer, "load_loras: no transformer weights");
    auto files = std::make_shared<std::vector<layouts::LoraFile>>();
    std::vector<double> scales;
    for (const LoraRequest& r : opt.files) {
        KILN_CHECK(std::isfinite(r.scale), "lora ", r.path, ": scale ", r.scale, " is not finite");
        files->push_back(layouts::read_lora(r.path, family, targets, opt.allow_unmatched));
        scales.push_back(r.scale);
        if (opt.apply == "merge")
            layouts::check_mergeable(
                files->back(),
                [&](const std::string& c, const std::string& w) { return components.at(c)->find(w)->dtype; },
                "--lora-apply merge folds LoRAs into f32, f16 or bf16 weights only");
    }
    // Pointers into files: taken once the vector no longer grows.
    return component_set(std::move(files), "transformer", scales, opt.apply == "runtime");
}

std::shared_ptr<const LoraSet> lora_component(const std::shared_ptr<const LoraSet>& set, const std::string& component) {
    if (!set) return nullptr;
    if (set->component == component) return set;
    auto s = component_set(set->files, component, set->scales, set->runtime);
    return s->terms.empty() ? nullptr : s;
}

std::unique_ptr<WeightStore> with_loras(std::unique_ptr<WeightStore> ws, std::shared_ptr<const LoraSet> set,
                                        const std::function<void(const std::string&)>& log) {
    if (!set) return ws;
    for (const layouts::LoraFile& f : *set->files) {
        if (!log) break;
        log(f.summary());
        if (!f.unmatched.empty())
            log("warning: lora " + f.path + ": " + std::to_string(f.unmatched.size()) +
                " keys match no module and are not applied, e.g. " + f.unmatched[0]);
        for (const std::string& d : f.dropped) log("warning: lora " + f.path + ": " + d);
    }
    if (set->runtime || set->terms.empty()) return ws;  // runtime: the Builder adds the side paths (set_loras)
    return std::make_unique<LoraStore>(std::move(ws), std::move(set));
}

std::function<Tensor(const ir::Value&)> cpu_weights(const WeightStore& ws,
                                                    const std::map<std::string, Tensor>& consts) {
    return [&ws, &consts](const ir::Value& v) {
        auto it = consts.find(v.name);
        // The oracle sees exactly the values the GPU sees: stored dtype rounded to the declared one.
        Tensor t = it != consts.end() ? it->second : ws.read(v.name);
        if (t.shape.size() == 4 && t.shape[2] == 1 && t.shape[3] == 1 && v.shape == Shape{t.shape[0], t.shape[1]})
            t.shape = v.shape;  // a 1x1 convolution's weight read as its matrix (Builder::matrix_1x1)
        return t.astype(v.dtype).astype(DType::f32);
    };
}

}  // namespace kiln::models
