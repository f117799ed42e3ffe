#pragma once
// Inside kiln-convert: a component as planned (its tensors in the output's order, block kinds and runs), and the
// writer that lays the planned components out as a Kiln file (converter/write_kiln.cpp).
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/convert.h"
#include "converter/tokenizer_files.h"
#include "models/layouts/layouts.h"
#include "runtime/core/gguf.h"

namespace kiln::converter {

struct Item {
    std::string rel;  // diffusers name (canonical), or name relative to its block
    const layouts::TensorInfo* src;
    DType out;
    Shape shape;  // as stored: src's, or [O, C] for a 1x1 conv read as a matrix (ArchSpec::matrices_1x1)
};

struct Run {
    int64_t first = 0, count = 0;
    uint64_t base = 0, stride = 0;
};

struct KindPlan {
    std::string name;
    int64_t count = 0;
    std::vector<std::vector<Item>> blocks;
    std::vector<Run> runs;
};

struct Component {
    std::string name, cls, config_text;
    bool scheduler = false;
    bool tokenizer = false;
    FileMap files;  // tokenizers: file name -> bytes
    std::unique_ptr<layouts::TensorSet> set;
    nlohmann::json cfg;  // models: the config, and where it came from (for messages)
    std::string cfg_where;
    std::vector<Item> loose;
    std::vector<KindPlan> kinds;
    int64_t params = 0;
};

// Writes the planned components as a Kiln file: metadata, then the tensor layout (offsets come back from the
// writer, so block bases/strides are exact). Progress and the closing summary line go to `log` when given.
Summary write_kiln_file(std::vector<Component>& comps, GgufWriter& w, const std::string& name,
                        const std::string& out_path, const Options& opt, std::ostream* log,
                        std::chrono::steady_clock::time_point t0);

}  // namespace kiln::converter
