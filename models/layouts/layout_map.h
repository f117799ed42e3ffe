#pragma once
// Internal to kiln_layouts: a file's tensor listing, the components found in it, and each component's map from
// diffusers/transformers names to the file's tensors. inspect() and open_component() both run the same maps, so a
// file inspect() accepts opens, and every key a map does not explain is an error at inspect().
#include <map>
#include <string>
#include <vector>

#include "models/layouts/layouts.h"

namespace kiln::layouts::detail {

// One tensor as the file stores it (GGUF shapes already in torch order).
struct Source {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t offset = 0, nbytes = 0;  // absolute offset in files[file]
    int file = 0;
};

// The header of a .safetensors (or a sharded set's index) or .gguf file; no tensor data is read.
struct Container {
    std::string path;
    std::string kind;   // "safetensors" or "gguf"
    std::string arch;   // GGUF general.architecture, "" if none
    bool kiln = false;  // a Kiln model file (GGUF with kiln.components)
    std::vector<std::string> files;
    std::vector<Source> tensors;
};
Container read_container(const std::string& path);

enum class Op {
    copy,     // the source tensor as it is
    rows,     // rows [r0, r1) of the source's dim 0
    swap,     // [a; b] -> [b; a] along dim 0 (BFL/Stability [shift; scale] -> diffusers [scale; shift])
    reshape,  // the source's bytes under `info.shape` (LDM 1x1 conv [C, C, 1, 1] -> [C, C])
    zero,     // computed: zeros the file lacks (BatchNorm's num_batches_tracked, which torch fills in as 0)
};

struct Entry {
    TensorInfo info;
    Op op = Op::copy;
    size_t src = 0;          // index into Container::tensors
    int64_t r0 = 0, r1 = 0;  // rows
};

// One component of a file: its detection and its keys with the prefix stripped.
struct Group {
    Detected det;
    std::vector<std::pair<std::string, size_t>> keys;  // stripped key -> index into Container::tensors
};

// Splits a container into components; throws for a LoRA, an optimizer state, an unsupported GGUF architecture or
// keys no layout claims. `role_hint` ("" or a role a caller named) decides CLIP-L vs CLIP-G when shapes cannot.
std::vector<Group> detect(const Container& c, const std::string& role_hint = "");

// The diffusers/transformers tensors of a component, sorted by name. Throws naming the keys the layout does not
// explain, and for fused tensors whose sizes do not split.
std::vector<Entry> map_component(const Container& c, const Group& g);

// The maps, one per layout family (flux_map.cpp, sd3_map.cpp, vae_map.cpp, text_map.cpp, z_image_map.cpp,
// flux2_map.cpp, qwen3_map.cpp). Each appends entries and the source keys it could not place to `unexplained`.
struct MapOut {
    const Container& c;
    std::vector<Entry> entries;
    std::vector<std::string> unexplained;

    const Source& src(size_t i) const { return c.tensors[i]; }
    void copy(size_t i, const std::string& name);
    void reshape(size_t i, const std::string& name, Shape shape);
    void swap(size_t i, const std::string& name);
    // Splits dim 0 of source i into consecutive row ranges of the given sizes (the last may be -1: the rest).
    void rows(size_t i, const std::vector<std::string>& names, std::vector<int64_t> sizes);
    // A fused [q; k; v] (torch.chunk(x, 3, dim=0)): three equal row ranges named names[0..2].
    void thirds(size_t i, const std::vector<std::string>& names);
    // A zero-filled tensor the file lacks (no source).
    void zero(const std::string& name, DType dtype, Shape shape);
};
void map_flux(const Group& g, MapOut& out);
void map_sd3(const Group& g, MapOut& out);
void map_vae_ldm(const Group& g, MapOut& out);
void map_t5(const Group& g, MapOut& out);           // transformers names; `shared` kept, a tied duplicate dropped
void map_t5_llama(const Group& g, MapOut& out);     // llama.cpp names (city96 / llama.cpp T5 GGUF)
void map_identity(const Group& g, MapOut& out);     // diffusers/transformers names already (CLIP, diffusers files)
void map_z_image(const Group& g, MapOut& out);      // Z-Image's original keys (Tongyi / ComfyUI) -> diffusers
void map_flux2(const Group& g, MapOut& out);        // FLUX.2's BFL keys -> diffusers
void map_vae_flux2(const Group& g, MapOut& out);    // FLUX.2's VAE: the LDM layout + nested quant convs and bn
void map_qwen3(const Group& g, MapOut& out);        // transformers' Qwen3 names, without "model."; lm_head dropped
void map_qwen3_llama(const Group& g, MapOut& out);  // llama.cpp's names (GGUF architecture qwen3)

// A rename rule: `from` is a full key or a module prefix ("img_in" matches "img_in.weight" -> "x_embedder.weight").
struct Rename {
    const char* from;
    const char* to;
};
// Applies the first matching rule to key; false when none matches.
bool rename(const std::vector<Rename>& rules, const std::string& key, std::string& out);
bool starts_with(const std::string& s, const std::string& p);
// "double_blocks.12.img_mod.lin.weight" with prefix "double_blocks." -> n = 12, rest = "img_mod.lin.weight".
bool block_key(const std::string& key, const std::string& prefix, int& n, std::string& rest);

}  // namespace kiln::layouts::detail
