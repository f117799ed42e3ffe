#pragma once
// The text-to-image pipelines' transformer for the guidance batch (and SD3's skip-layer one), built for one call or
// kept resident between calls in a TransformerCache (the C API's keep_transformer): a call whose graphs are the same
// (input shapes, mode, skip layers, LoRA files) then only writes its inputs, runtime LoRA scales included.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "models/pipelines/t2i_pipeline.h"

namespace kiln::models {

struct Transformers {
    std::unique_ptr<WeightStore> ws;
    ir::Graph g, slg_g;
    std::unique_ptr<Builder> b, slg_b;
    std::unique_ptr<exec::Executor> x, slg;
    std::map<std::string, Tensor> in, slg_in;  // the graphs' inputs as built (hidden_states, timestep set per step)
    std::string lora_apply;                    // "merge" or "runtime"; "" without LoRAs
    size_t lora_count = 0;

    // Builds the graphs (with the LoRAs of opt, read or as loaded) and their inputs; no device work.
    void graphs(const ModelSource& src, const T2IOptions& opt, const T2IPlan& p,
                const std::map<std::string, Tensor>& in, const TextConditioning& tx, const Shape& lat_shape);
    // Plans, records and uploads the executors and sets the inputs.
    void plan(vk::Context& ctx, const T2IOptions& opt);
    // What makes two calls' graphs and plans the same: the inputs' names, shapes and dtypes, the mode, the skip
    // layers, the LoRA files and how they apply. Not the inputs' values, nor the LoRA scales.
    std::string key(const T2IOptions& opt) const;
    // A resident transformer takes another call's inputs (built by graphs() with the same key); `scales`, when
    // given, replace the call's LoRA scales (TransformerCache::set_lora_scales).
    void set_inputs(const Transformers& from, const std::optional<std::vector<double>>& scales);
};

struct TransformerCache::Entry {
    std::string key;
    std::unique_ptr<Transformers> t;
    std::optional<std::vector<double>> lora_scales;  // set_lora_scales: they replace later calls' scales
};

// The LoRA files a model read last (the C API with keep_transformer), with each file's size and modification time as
// they were before the read: a call naming the same files, unchanged on disk, for the same family, apply mode and
// allow_unmatched (and, merged, the same scales: they are in the merged weights) takes that LoraSet instead of reading
// the files again; a runtime call with other scales too (its scales are graph inputs, Transformers::graphs). A file
// whose size or mtime changed is read again. Thread-safe: the C API resolves calls outside the device lock.
class LoraFileCache {
public:
    // opt's LoRAs, read by load_loras or as cached; `key` gets what they were read from (LoraOptions::loaded_from).
    // encoders_run: as load_model_loras (the text encoders' LoRAs are read too).
    std::shared_ptr<const LoraSet> load(const ModelSource& src, const std::string& family, const LoraOptions& opt,
                                        bool encoders_run, std::string& key);
    void clear();
    int reads() const;  // how many times load() read files (tests)

private:
    mutable std::mutex m_;
    std::string key_;
    std::shared_ptr<const LoraSet> set_;
    int reads_ = 0;
};

// The transformer a call runs: `fresh` planned, or the cache's resident one when its key matches (`reused` set),
// which then takes fresh's inputs. With a cache, the one returned stays in it.
Transformers& resident_transformers(vk::Context& ctx, TransformerCache* cache, std::unique_ptr<Transformers>& fresh,
                                    const T2IOptions& opt, bool& reused);

}  // namespace kiln::models
