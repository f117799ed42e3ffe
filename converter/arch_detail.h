#pragma once
// What converter/arch.cpp (transformers, text encoders) and converter/arch_vae.cpp (autoencoders) share to list a
// component's tensors: typed config access and the tensor-name builder. Internal to the converter.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/arch.h"
#include "runtime/core/error.h"

namespace kiln::converter::arch_detail {

using json = nlohmann::json;

// Typed config access: a present key of the wrong type is an error naming the config and key.
struct Config {
    const json& j;
    const std::string& where;

    bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
    int64_t integer(const char* k, int64_t def) const {
        if (!has(k)) return def;
        KILN_CHECK(j[k].is_number_integer(), where, ": config key '", k, "' must be an integer, got ", j[k].dump());
        return j[k].get<int64_t>();
    }
    bool boolean(const char* k, bool def) const {
        if (!has(k)) return def;
        KILN_CHECK(j[k].is_boolean(), where, ": config key '", k, "' must be true/false, got ", j[k].dump());
        return j[k].get<bool>();
    }
    std::string string(const char* k, const std::string& def) const {
        if (!has(k)) return def;
        KILN_CHECK(j[k].is_string(), where, ": config key '", k, "' must be a string, got ", j[k].dump());
        return j[k].get<std::string>();
    }
    std::vector<int64_t> ints(const char* k) const {
        std::vector<int64_t> out;
        if (!has(k)) return out;
        KILN_CHECK(j[k].is_array(), where, ": config key '", k, "' must be a list of integers");
        for (auto& e : j[k]) {
            KILN_CHECK(e.is_number_integer(), where, ": config key '", k, "' must be a list of integers");
            out.push_back(e.get<int64_t>());
        }
        return out;
    }
    std::vector<std::string> strings(const char* k) const {
        std::vector<std::string> out;
        if (!has(k)) return out;
        KILN_CHECK(j[k].is_array(), where, ": config key '", k, "' must be a list of strings");
        for (auto& e : j[k]) {
            KILN_CHECK(e.is_string(), where, ": config key '", k, "' must be a list of strings");
            out.push_back(e.get<std::string>());
        }
        return out;
    }
    int64_t positive(const char* k, int64_t def, int64_t max = 1 << 20) const {
        int64_t v = integer(k, def);
        KILN_CHECK(v >= 0 && v <= max, where, ": config key '", k, "' = ", v, " is out of range [0, ", max, "]");
        return v;
    }
};

// Collects names under a prefix: N("attn").lin("to_q") -> "attn.to_q.weight", "attn.to_q.bias".
struct Names {
    std::vector<std::string>& out;
    std::string prefix;
    std::vector<std::string>* matrices_1x1 = nullptr;  // ArchSpec::matrices_1x1, for conv_1x1_linear
    Names sub(const std::string& p) const { return {out, prefix + p + ".", matrices_1x1}; }
    void w(const std::string& p) const { out.push_back(prefix + p + ".weight"); }
    void b(const std::string& p) const { out.push_back(prefix + p + ".bias"); }
    void raw(const std::string& p) const { out.push_back(prefix + p); }
    void lin(const std::string& p, bool bias = true) const {
        w(p);
        if (bias) b(p);
    }
    // A 1x1 nn.Conv2d the model reads as a linear (Builder::matrix_1x1): its weight is stored as [O, C].
    void conv_1x1_linear(const std::string& p, bool bias) const {
        KILN_CHECK(matrices_1x1, "internal: Names for ", prefix, p, " has no matrices_1x1 list");
        lin(p, bias);
        matrices_1x1->push_back(prefix + p + ".weight");
    }
    void timestep_embedding(const std::string& p) const {  // TimestepEmbedding
        lin(p + ".linear_1");
        lin(p + ".linear_2");
    }
    void layer_norm(const std::string& p, bool affine) const {  // nn.LayerNorm(elementwise_affine)
        if (affine) lin(p);
    }
    void feed_forward(const std::string& p, bool bias = true) const {  // FeedForward: net.0.proj, net.2
        lin(p + ".net.0.proj", bias);
        lin(p + ".net.2", bias);
    }
    // Attention.norm_q/norm_k (and norm_added_*) for a qk_norm setting; returns false if unsupported.
    void qk_norm(const std::string& attn, const std::string& kind, bool added, const std::string& where) const {
        if (kind.empty()) return;
        const char* q = added ? ".norm_added_q" : ".norm_q";
        const char* k = added ? ".norm_added_k" : ".norm_k";
        if (kind == "rms_norm") {
            w(attn + q);
            w(attn + k);
        } else if (kind == "layer_norm") {
            lin(attn + q);
            lin(attn + k);
        } else if (kind == "fp32_layer_norm" || kind == "l2") {
            // no parameters
        } else {
            KILN_FAIL(where, ": qk_norm '", kind, "' is not supported (supported: null, rms_norm, layer_norm)");
        }
    }
    void self_attention(const std::string& p, bool bias, bool out_bias = true) const {
        lin(p + ".to_q", bias);
        lin(p + ".to_k", bias);
        lin(p + ".to_v", bias);
        lin(p + ".to_out.0", out_bias);
    }
};

// The autoencoders' tensor lists (arch_vae.cpp).
// flux2: AutoencoderKLFlux2 (decoder_block_out_channels, the BatchNorm2d `bn` and its running statistics).
ArchSpec autoencoder_kl(const Config& c, bool flux2);
ArchSpec autoencoder_dc(const Config& c);

}  // namespace kiln::converter::arch_detail
