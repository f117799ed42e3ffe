#include "converter/info.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "converter/convert.h"
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
const char* kKeyFields[] = {"num_layers",
                            "num_single_layers",
                            "num_attention_heads",
                            "attention_head_dim",
                            "in_channels",
                            "out_channels",
                            "patch_size",
                            "sample_size",
                            "num_embeds_ada_norm",
                            "cross_attention_dim",
                            "caption_channels",
                            "joint_attention_dim",
                            "pooled_projection_dim",
                            "qk_norm",
                            "dual_attention_layers",
                            "guidance_embeds",
                            "block_out_channels",
                            "layers_per_block",
                            "latent_channels",
                            "norm_num_groups",
                            "scaling_factor",
                            "shift_factor",
                            "num_train_timesteps",
                            "beta_schedule",
                            "beta_start",
                            "beta_end",
                            "prediction_type",
                            "timestep_spacing",
                            "steps_offset",
                            "solver_order",
                            "algorithm_type",
                            "shift",
                            "use_dynamic_shifting"};
}  // namespace

void print_model_info(const std::string& path, std::ostream& os) {
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
        os << "\n[" << c << "] " << f.get_string(p + "class") << "\n";
        json cfg = json::parse(converter::python_json_to_json(f.get_string(p + "config")), nullptr, false);
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
