#include "converter/info.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "converter/assemble.h"
#include "converter/convert.h"
#include "converter/tokenizer_files.h"
#include "models/layouts/layouts.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"

namespace kiln {

std::string human_bytes(double b) {
    const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (b >= 1024 && k < 4) b /= 1024, ++k;
    char buf[32];
    std::snprintf(buf, sizeof buf, k ? "%.1f %s" : "%.0f %s", b, u[k]);
    return buf;
}

namespace {
using json = nlohmann::json;

std::string human_count(int64_t n) {
    char buf[32];
    if (n >= 1000000000)
        std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
    else if (n >= 1000000)
        std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
    else if (n >= 1000)
        std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld", (long long)n);
    return buf;
}

// The config fields worth a glance, in this order, when present.
const char* kKeyFields[] = {
    "num_layers", "num_single_layers", "num_attention_heads", "attention_head_dim", "in_channels", "out_channels",
    "patch_size", "sample_size", "num_embeds_ada_norm", "cross_attention_dim", "caption_channels",
    "joint_attention_dim", "pooled_projection_dim", "qk_norm", "dual_attention_layers", "guidance_embeds",
    "block_out_channels", "layers_per_block", "latent_channels", "norm_num_groups", "scaling_factor", "shift_factor",
    "num_train_timesteps", "beta_schedule", "beta_start", "beta_end", "prediction_type", "timestep_spacing",
    "steps_offset", "solver_order", "algorithm_type", "shift", "use_dynamic_shifting",
    // Z-Image's transformer
    "dim", "n_layers", "n_refiner_layers", "n_heads", "cap_feat_dim", "axes_dims",
    // transformers text encoders (CLIP, T5)
    "hidden_size", "intermediate_size", "projection_dim", "hidden_act", "d_model", "d_ff", "d_kv", "num_heads",
    "feed_forward_proj", "relative_attention_num_buckets", "relative_attention_max_distance", "vocab_size",
    "max_position_embeddings"};

// Number of pieces in a SentencePiece ModelProto (field 1, repeated, length-delimited); -1 if malformed.
int64_t spiece_pieces(const std::string& b) {
    size_t i = 0;
    auto varint = [&](uint64_t& v) {
        v = 0;
        for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
            uint8_t c = (uint8_t)b[i++];
            v |= (uint64_t)(c & 0x7F) << shift;
            if (!(c & 0x80)) return true;
        }
        return false;
    };
    int64_t n = 0;
    while (i < b.size()) {
        uint64_t tag, len;
        if (!varint(tag)) return -1;
        switch (tag & 7) {
            case 0:
                if (!varint(len)) return -1;
                break;
            case 1:
                i += 8;
                break;
            case 5:
                i += 4;
                break;
            case 2:
                if (!varint(len) || len > b.size() - i) return -1;
                i += len;
                n += (tag >> 3) == 1;
                break;
            default:
                return -1;
        }
        if (i > b.size()) return -1;
    }
    return n;
}

void print_tokenizer(const GgufFile& f, const std::string& c, const json& cfg, std::ostream& os) {
    converter::FileMap files = converter::read_tokenizer_files(f, c);
    os << "  files:";
    bool first = true;
    for (auto& [n, bytes] : files)
        os << (first ? " " : ", ") << n << " (" << human_bytes((double)bytes.size()) << ")", first = false;
    os << "\n";
    if (files.count("vocab.json")) {
        json v = json::parse(files["vocab.json"], nullptr, false);
        if (v.is_object()) os << "  vocab: " << v.size() << " tokens (vocab.json)\n";
    } else if (files.count("spiece.model")) {
        int64_t n = spiece_pieces(files["spiece.model"]);
        os << "  vocab: " << (n < 0 ? std::string("? (spiece.model is malformed)") : std::to_string(n) + " pieces")
           << " (spiece.model)\n";
    }
    if (files.count("added_tokens.json")) {
        json v = json::parse(files["added_tokens.json"], nullptr, false);
        if (v.is_object()) os << "  added tokens: " << v.size() << "\n";
    }
    if (cfg.is_object() && cfg.contains("model_max_length") && cfg["model_max_length"].is_number()) {
        double m = cfg["model_max_length"].get<double>();
        os << "  model_max_length: " << (m > 1e6 ? std::string("unset") : std::to_string((int64_t)m)) << "\n";
    }
}
}  // namespace

namespace {
// A single file in another project's layout: what it holds, the published model its transformer is, and what a
// generation still needs.
void print_layout_info(const std::string& path, std::ostream& os, const std::string& hf_home) {
    const layouts::FileInfo info = layouts::inspect(path);
    size_t n = 0;
    for (auto& [t, k] : info.dtype_counts) n += k;
    os << path << ": " << info.container << " single file, " << human_bytes((double)std::filesystem::file_size(path))
       << ", " << n << " tensors";
    if (!info.gguf_architecture.empty()) os << ", GGUF architecture " << info.gguf_architecture;
    os << "\n  types:";
    for (auto& [t, k] : info.dtype_counts) os << " " << t << " " << k;
    os << "\n";
    for (auto& d : info.components) {
        os << "  " << d.role << ": " << (d.family.empty() ? "" : d.family + ", ") << d.layout << " layout";
        if (!d.prefix.empty()) os << ", keys under '" << d.prefix << "'";
        os << ", " << d.n_tensors << " tensors\n";
    }
    converter::ComponentFiles files;
    files.model = path;
    files.hf_home = hf_home;
    bool has_transformer = false;
    for (auto& d : info.components) has_transformer |= d.role == "transformer";
    if (!has_transformer) {
        os << "  (no transformer: use it beside one, e.g. --vae / --clip-l / --t5xxl / --llm " << path << ")\n";
        return;
    }
    try {  // the same checks as generate: configs, every tensor present, tokenizers
        const converter::Assembly a = converter::assemble(files);
        os << "  configs: " << a.configs_from << "\n";
        const std::string missing = a.incomplete();
        os << "  " << (missing.empty() ? std::string("complete: kiln generate --model ") + path : missing) << "\n";
    } catch (const Error& e) {
        os << "  cannot run as it is: " << e.what() << "\n";
    }
}
}  // namespace

void print_model_info(const std::string& path, std::ostream& os, const std::string& hf_home) {
    if (!std::filesystem::is_directory(path) && !layouts::is_kiln_file(path))
        return print_layout_info(path, os, hf_home);
    GgufFile f = GgufFile::open(path);
    KILN_CHECK(f.has("general.architecture") && f.get_string("general.architecture") == "kiln", path,
               ": not a Kiln model file (general.architecture is not 'kiln')");
    os << path << ": Kiln model file v" << f.get_int("kiln.format_version") << ", "
       << human_bytes((double)f.file_size()) << ", " << f.tensors().size() << " tensors, alignment " << f.alignment()
       << "\n";
    os << "  name: " << (f.has("general.name") ? f.get_string("general.name") : std::string("?")) << "\n";
    if (f.has("kiln.pipeline.class")) {
        os << "  pipeline: " << f.get_string("kiln.pipeline.class");
        if (f.has("kiln.pipeline.id2label")) {
            json labels = json::parse(f.get_string("kiln.pipeline.id2label"), nullptr, false);
            if (labels.is_object()) os << " (" << labels.size() << " class labels)";
        }
        os << "\n";
    }
    for (const std::string& c : f.get_string_array("kiln.components")) {
        const std::string p = "kiln." + c + ".";
        const std::string cls = f.get_string(p + "class");
        os << "\n[" << c << "] " << cls << "\n";
        json cfg = json::parse(converter::python_json_to_json(f.get_string(p + "config")), nullptr, false);
        if (f.has(p + "files")) {  // a tokenizer
            print_tokenizer(f, c, cfg, os);
            continue;
        }
        if (cfg.is_object()) {
            std::string line;
            for (const char* k : kKeyFields)
                if (cfg.contains(k) && !cfg[k].is_null())
                    line += std::string(line.empty() ? "" : ", ") + k + "=" + cfg[k].dump();
            if (!line.empty()) os << "  config: " << line << "\n";
        }
        std::map<std::string, size_t> hist;
        uint64_t bytes = 0;
        size_t count = 0;
        for (auto& t : f.tensors())
            if (t.name.compare(0, c.size() + 1, c + ".") == 0) {
                hist[dtype_name(t.dtype)]++;
                bytes += t.nbytes;
                count++;
            }
        const models::ComponentClass* k = models::find_component_class(cls);
        using models::ComponentKind;
        const bool clip = k && (k->kind == ComponentKind::clip_text || k->kind == ComponentKind::clip_text_projection);
        if (cfg.is_object() && clip && cfg.contains("num_hidden_layers"))
            os << "  layers: " << cfg["num_hidden_layers"].dump() << "\n";
        else if (cfg.is_object() && k && k->kind == ComponentKind::t5_encoder)
            os << "  layers: " << (cfg.contains("num_layers") ? cfg["num_layers"].dump() : "6") << "\n";
        if (f.has(p + "params") && c != "scheduler")
            os << "  parameters: " << human_count(f.get_int(p + "params")) << " (" << f.get_int(p + "params") << ")\n";
        if (count) {
            os << "  tensors: " << count << ", " << human_bytes((double)bytes) << " (";
            bool first = true;
            for (auto& [d, n] : hist) os << (first ? "" : ", ") << d << " x" << n, first = false;
            os << ")\n";
        }
        if (f.has(p + "blocks"))
            for (const std::string& k : f.get_string_array(p + "blocks")) {
                const std::string bk = p + "blocks." + k + ".";
                os << "  blocks: " << k << " x" << f.get_int(bk + "count");
                auto runs = f.get_int_array(bk + "runs");
                for (size_t r = 0; r + 3 < runs.size(); r += 4)
                    os << (r ? "; " : ": ") << "[" << runs[r] << ".." << runs[r] + runs[r + 1] - 1 << "] base "
                       << runs[r + 2] << " stride " << human_bytes((double)runs[r + 3]);
                os << "\n";
            }
    }
}

}  // namespace kiln
