#pragma once
// Weight stores: where a model's tensors come from (a Kiln model file component, or a diffusers
// safetensors checkpoint directly), and the Builder that model code uses to declare weights.
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/graph.h"

namespace kiln::layouts {
class TensorSet;
}

namespace kiln::models {

struct LoraSet;  // LoRAs as read (load_loras)

struct TensorMeta {
    Shape shape;
    DType dtype;
};

class WeightStore {
public:
    virtual ~WeightStore() = default;
    virtual const TensorMeta* find(const std::string& name) const = 0;  // nullptr if absent
    // What the Builder asks: the tensor `name` that the config implies has `shape`. Stores backed by
    // files answer find(); the synthetic store makes the tensor up.
    virtual const TensorMeta* lookup(const std::string& name, const Shape& shape) const { return find(name); }
    virtual Tensor read(const std::string& name) const = 0;  // stored dtype
    virtual std::string source() const = 0;                  // for error messages
    // Where tensor `name` lies, in its stored dtype, in a mapped model file (file null: not mapped).
    virtual exec::HostBytes view(const std::string& name) const { return {}; }
};

// Opens the weights of a diffusers component folder (diffusion_pytorch_model[.fp16].safetensors, single or
// sharded) as a store. Configs are read by ModelSource.
std::unique_ptr<WeightStore> open_diffusers_component(const std::string& dir);
// Any TensorSet as a store: a single file in another project's layout under diffusers' names (models/layouts).
std::unique_ptr<WeightStore> set_store(std::unique_ptr<layouts::TensorSet> set);
// A component of a Kiln model file: tensors named "<component>.<diffusers name>".
std::unique_ptr<WeightStore> open_kiln_component(const std::string& file, const std::string& component);

// Random weights in memory for any architecture at any size (`kiln bench --synthetic`): matrices in
// `matrix_dtype` (quantized: linear matrices only, as kiln-convert stores them; see quant_storage()),
// uniform(-1, 1) / sqrt(fan_in); vectors f32. Deterministic per tensor name and seed.
std::unique_ptr<WeightStore> synthetic_store(DType matrix_dtype, uint64_t seed = 0);

// Model code declares weights through this: shapes are checked against the store, matrices keep
// their stored dtype (f32/f16/bf16, or quantized for linear operands), everything else is f32. Constants (e.g.
// positional tables computed on the host) are weights whose bytes the model supplies.
class Builder {
public:
    Builder(ir::Graph& g, const WeightStore& ws) : g_(g), ws_(ws) {}
    ir::Val matrix(const std::string& name, const Shape& shape);  // linear/conv/embedding operand
    // A 1x1 convolution's weight, stored [O, C, 1, 1] (diffusers) or [O, C] (kiln-convert, quantized like a linear's),
    // declared as the matrix [O, C] it is (the same bytes), so it can be the operand of a linear over channels-last
    // tokens.
    ir::Val matrix_1x1(const std::string& name, int64_t O, int64_t C);
    ir::Val vec(const std::string& name, const Shape& shape);      // f32
    ir::Val opt_vec(const std::string& name, const Shape& shape);  // Val{} if absent
    bool has(const std::string& name) const { return ws_.find(name) != nullptr; }
    ir::Val constant(const std::string& name, Tensor t);  // f32 host tensor
    // The tensor `name` (of `shape`) read on the host as f32: small tensors folded at build time (BatchNorm2d).
    Tensor read_f32(const std::string& name, const Shape& shape) const;
    // Rows `ids` (i32 [N]) of the matrix `name` [V, D], gathered on the host as f32 [N, D] with exactly the values
    // the device would read from the stored dtype. For vocabulary tables: they stay off the device (T5-XXL's is
    // 263 MB at f16, more than many devices bind at once) and only N rows are ever read.
    Tensor gather_rows(const std::string& name, const Shape& shape, const Tensor& ids) const;
    ir::Graph& g() { return g_; }
    // The weight callback executors need: store tensors converted to the declared dtype, or constants; its view
    // says where a weight stored in the declared dtype lies in the mapped model file (read in place there).
    exec::WeightBytesFn weight_fn() const;
    const std::map<std::string, Tensor>& constants() const { return consts_; }
    // The LoRA side path (LoraOptions::apply "runtime"), set before the model is built: lora_side() then adds
    // B_cat (s_cat * (A_cat x)) to the linear `name`'s output y wherever a LoRA targets that linear in any instance
    // of its block kind. A_cat [R, in] stacks each file's A (zero-padded to the kind's largest rank, zero where an
    // instance has none, so every instance has the same graph and the block is recorded once); B_cat [out, R] the
    // B's times alpha / r. Both are block weights (constants named "<name>.lora_A|B"), selected per instance. s_cat
    // [R] (each file's user scale over its columns) is a graph input "lora_scales.<r_1>.<r_2>..." (one per rank
    // pattern): lora_scale_values() gives them, and the caller sets them with the other inputs; changing them later
    // (Executor::set_input) re-records nothing.
    void set_loras(std::shared_ptr<const LoraSet> set) { loras_ = std::move(set); }
    ir::Val lora_side(const std::string& name, ir::Val x, ir::Val y, int in, int out);
    // The scale inputs the graph has, for the user scales of each file in order (count checked), or for the
    // LoraSet's own; empty without runtime LoRAs.
    std::map<std::string, Tensor> lora_scale_values(const std::vector<double>& scales) const;
    std::map<std::string, Tensor> lora_scale_values() const;

private:
    const TensorMeta& meta(const std::string& name, const Shape& shape) const;
    ir::Graph& g_;
    const WeightStore& ws_;
    std::map<std::string, Tensor> consts_;
    std::shared_ptr<const LoraSet> loras_;
    struct LoraInput {
        ir::Val val;
        std::vector<int64_t> ranks;
    };
    std::map<std::string, LoraInput> lora_inputs_;
    ir::Val lora_scale_input(const std::vector<int64_t>& ranks);
};

// LoRAs on a transformer (docs/lora.md): the files with the user's scales, how they are applied, and whether keys
// that match no module are a warning (diffusers' behaviour) instead of an error.
struct LoraRequest {
    std::string path;
    double scale = 1;  // diffusers' adapter weight x joint_attention_kwargs scale (x fuse_lora's lora_scale)
};
struct LoraOptions {
    std::vector<LoraRequest> files;
    bool allow_unmatched = false;
    // "runtime" (the default): a low-rank side path beside each targeted linear (Builder::lora_side), the base weight
    // untouched (quantized ones included), the scales device data; "merge": W + s (alpha/r) B A folded into
    // f32/f16/bf16 weights as they are read.
    std::string apply = "runtime";
    // Read ahead by load_loras (the C API checks them before any heavy work); null: read where the model loads.
    std::shared_ptr<const LoraSet> loaded;
    // With loaded from a LoraFileCache: the files' paths, sizes and mtimes as read (a resident transformer's key).
    std::string loaded_from;
};
// Reads and checks opt's LoRAs against the transformer's weights ws (`family`: the registry's name, "Flux").
// Throws for anything read_lora refuses, a quantized or fp8 target with merge (it folds into f32/f16/bf16 only), an
// apply mode other than merge or runtime. Text-encoder keys are dropped with a warning line (no encoder given).
std::shared_ptr<const LoraSet> load_loras(const WeightStore& ws, const std::string& family, const LoraOptions& opt);
// The same against several components: "transformer" (required) and the text encoders loaded ("text_encoder",
// "text_encoder_2": layouts::lora_text_encoders). The set returned applies to the transformer; lora_component()
// gives the one of another component, from the same files.
// absent_why: why a text encoder of the family not in components takes no LoRA (its keys' warning line).
std::shared_ptr<const LoraSet> load_loras(const std::map<std::string, const WeightStore*>& components,
                                          const std::string& family, const LoraOptions& opt,
                                          const std::string& absent_why = "");
// The LoRAs of `component` in set's files (same files, scales and apply mode: Builder::set_loras and with_loras take
// it as they take the transformer's); nullptr when no module targets it.
std::shared_ptr<const LoraSet> lora_component(const std::shared_ptr<const LoraSet>& set, const std::string& component);
// Merge: the store whose weights the LoRAs target read merged (view() gives nothing for them: never read in place);
// the others as ws has them. ws itself when there are none, or for runtime LoRAs (Builder::set_loras). Reports each
// file's summary (tensors matched, modules of every component; unmatched and dropped keys) through `log`.
std::unique_ptr<WeightStore> with_loras(std::unique_ptr<WeightStore> ws, std::shared_ptr<const LoraSet> set,
                                        const std::function<void(const std::string&)>& log);

// The CPU reference's view of the same weights (f32).
std::function<Tensor(const ir::Value&)> cpu_weights(const WeightStore& ws, const std::map<std::string, Tensor>& consts);

}  // namespace kiln::models
