#include "tests/support/original_layouts.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/quant.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

namespace kiln::test {

namespace {

using Tensors = std::map<std::string, Tensor>;  // by name: the files are written in name order

SafeTensors fixture(const std::string& c, const std::string& component) {
    const bool text = component == "text_encoder";
    return SafeTensors::open(data_path("fixtures/" + c + "_pipeline/" + component +
                                       (text ? "/model.safetensors" : "/diffusion_pytorch_model.safetensors")));
}

// s with the first `from` replaced by `to` (unchanged when absent).
std::string replace(std::string s, const std::string& from, const std::string& to) {
    const size_t p = s.find(from);
    if (p != std::string::npos) s.replace(p, from.size(), to);
    return s;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
    Tensor t = parts.at(0);
    for (size_t i = 1; i < parts.size(); ++i) {
        KILN_CHECK(parts[i].dtype == t.dtype && parts[i].shape.size() == t.shape.size(), "concat of unlike tensors");
        t.shape[0] += parts[i].shape[0];
        t.bytes.insert(t.bytes.end(), parts[i].bytes.begin(), parts[i].bytes.end());
    }
    return t;
}

// [a; b] -> [b; a] along dim 0: diffusers' [scale; shift] as BFL's [shift; scale].
Tensor swap_halves(Tensor t) {
    std::rotate(t.bytes.begin(), t.bytes.begin() + (std::ptrdiff_t)(t.bytes.size() / 2), t.bytes.end());
    return t;
}

void write(const std::string& path, const Tensors& ts, const std::string& prefix) {
    std::vector<std::pair<std::string, Tensor>> v;
    for (const auto& [n, t] : ts) v.emplace_back(prefix + n, t);
    write_safetensors(path, v);
}

// diffusers' fused-attention triples: "<base>to_q.<leaf>" with to_k / to_v (or add_q_proj / add_k_proj / add_v_proj)
// beside it become one tensor; returns false for a name that is not the first of a triple.
bool fused(const SafeTensors& src, const std::string& n, const std::string& q, const std::string& k,
           const std::string& v, Tensor& out) {
    if (n.find(q) == std::string::npos) return false;
    out = concat_rows({src.read(n), src.read(replace(n, q, k)), src.read(replace(n, q, v))});
    return true;
}

}  // namespace

void write_z_image_original(const std::string& path, const std::string& prefix) {
    const SafeTensors src = fixture("z_image", "transformer");
    Tensors out;
    for (const auto& i : src.tensors()) {
        const std::string& n = i.name;
        Tensor t;
        if (fused(src, n, ".attention.to_q.", ".attention.to_k.", ".attention.to_v.", t)) {
            out[replace(n, ".attention.to_q.", ".attention.qkv.")] = t;
        } else if (n.find(".attention.to_k.") != std::string::npos || n.find(".attention.to_v.") != std::string::npos) {
            continue;  // in the qkv above
        } else if (n == "x_pad_token" || n == "cap_pad_token") {
            t = src.read(n);
            t.shape = {t.shape.at(1)};  // stored 1-D by some uploads ([D]; diffusers [1, D])
            out[n] = t;
        } else {
            std::string o = replace(n, "all_x_embedder.2-1.", "x_embedder.");
            o = replace(o, "all_final_layer.2-1.", "final_layer.");
            o = replace(o, ".attention.to_out.0.", ".attention.out.");
            o = replace(o, ".attention.norm_q.", ".attention.q_norm.");
            o = replace(o, ".attention.norm_k.", ".attention.k_norm.");
            out[o] = src.read(n);
        }
    }
    // The original model's final RMSNorm weight, which diffusers' converter drops (its model has none).
    Tensor norm_final(DType::f32, {out.at("x_embedder.weight").shape[0]});
    out["norm_final.weight"] = norm_final;
    write(path, out, prefix);
}

void write_flux2_bfl(const std::string& path, const std::string& prefix) {
    const SafeTensors src = fixture("flux2_klein", "transformer");
    static const std::pair<const char*, const char*> top[] = {
        {"x_embedder.", "img_in."},
        {"context_embedder.", "txt_in."},
        {"time_guidance_embed.timestep_embedder.linear_1.", "time_in.in_layer."},
        {"time_guidance_embed.timestep_embedder.linear_2.", "time_in.out_layer."},
        {"time_guidance_embed.guidance_embedder.linear_1.", "guidance_in.in_layer."},
        {"time_guidance_embed.guidance_embedder.linear_2.", "guidance_in.out_layer."},
        {"double_stream_modulation_img.linear.", "double_stream_modulation_img.lin."},
        {"double_stream_modulation_txt.linear.", "double_stream_modulation_txt.lin."},
        {"single_stream_modulation.linear.", "single_stream_modulation.lin."},
        {"proj_out.", "final_layer.linear."},
    };
    static const std::pair<const char*, const char*> dbl[] = {
        {"attn.to_out.0.", "img_attn.proj."},
        {"attn.to_add_out.", "txt_attn.proj."},
        {"attn.norm_q.weight", "img_attn.norm.query_norm.scale"},
        {"attn.norm_k.weight", "img_attn.norm.key_norm.scale"},
        {"attn.norm_added_q.weight", "txt_attn.norm.query_norm.scale"},
        {"attn.norm_added_k.weight", "txt_attn.norm.key_norm.scale"},
        {"ff.linear_in.", "img_mlp.0."},
        {"ff.linear_out.", "img_mlp.2."},
        {"ff_context.linear_in.", "txt_mlp.0."},
        {"ff_context.linear_out.", "txt_mlp.2."},
    };
    static const std::pair<const char*, const char*> sgl[] = {
        {"attn.to_qkv_mlp_proj.", "linear1."},
        {"attn.to_out.", "linear2."},
        {"attn.norm_q.weight", "norm.query_norm.scale"},
        {"attn.norm_k.weight", "norm.key_norm.scale"},
    };
    Tensors out;
    for (const auto& i : src.tensors()) {
        const std::string& n = i.name;
        auto rename = [&](const std::string& block, const std::string& to, const auto& rules) {
            const size_t dot = n.find('.', block.size());
            const std::string idx = n.substr(block.size(), dot - block.size()), rest = n.substr(dot + 1);
            for (const auto& [f, t] : rules)
                if (rest.rfind(f, 0) == 0) return to + idx + "." + t + rest.substr(std::strlen(f));
            KILN_FAIL("write_flux2_bfl: no BFL name for ", n);
        };
        Tensor t;
        if (n.rfind("transformer_blocks.", 0) == 0) {
            if (fused(src, n, "attn.to_q.", "attn.to_k.", "attn.to_v.", t))
                out[replace(replace(n, "transformer_blocks.", "double_blocks."), "attn.to_q.", "img_attn.qkv.")] = t;
            else if (fused(src, n, "attn.add_q_proj.", "attn.add_k_proj.", "attn.add_v_proj.", t))
                out[replace(replace(n, "transformer_blocks.", "double_blocks."), "attn.add_q_proj.", "txt_attn.qkv.")] =
                    t;
            else if (n.find(".attn.to_k.") == std::string::npos && n.find(".attn.to_v.") == std::string::npos &&
                     n.find(".attn.add_k_proj.") == std::string::npos &&
                     n.find(".attn.add_v_proj.") == std::string::npos)
                out[rename("transformer_blocks.", "double_blocks.", dbl)] = src.read(n);
        } else if (n.rfind("single_transformer_blocks.", 0) == 0) {
            out[rename("single_transformer_blocks.", "single_blocks.", sgl)] = src.read(n);
        } else if (n.rfind("norm_out.linear.", 0) == 0) {
            out[replace(n, "norm_out.linear.", "final_layer.adaLN_modulation.1.")] = swap_halves(src.read(n));
        } else {
            std::string o;
            for (const auto& [f, to] : top)
                if (n.rfind(f, 0) == 0) o = to + n.substr(std::strlen(f));
            KILN_CHECK(!o.empty(), "write_flux2_bfl: no BFL name for ", n);
            out[o] = src.read(n);
        }
    }
    write(path, out, prefix);
}

void write_vae_ldm(const std::string& c, const std::string& path, bool tracked) {
    const SafeTensors src = fixture(c, "vae");
    int up = 0;  // decoder levels: LDM numbers them from the highest resolution, diffusers from the lowest
    for (const auto& i : src.tensors())
        if (i.name.rfind("decoder.up_blocks.", 0) == 0) up = std::max(up, std::stoi(i.name.substr(18)) + 1);
    Tensors out;
    for (const auto& i : src.tensors()) {
        std::string o = i.name;
        Tensor t = src.read(o);
        if (o == "bn.num_batches_tracked" && !tracked) continue;
        if (o.rfind("quant_conv.", 0) == 0) {
            o = "encoder." + o;
        } else if (o.rfind("post_quant_conv.", 0) == 0) {
            o = "decoder." + o;
        } else if (o.rfind("encoder.down_blocks.", 0) == 0) {
            o = replace(o, "down_blocks.", "down.");
            o = replace(o, ".resnets.", ".block.");
            o = replace(o, ".downsamplers.0.", ".downsample.");
        } else if (o.rfind("decoder.up_blocks.", 0) == 0) {
            const int lvl = std::stoi(o.substr(18));
            o = "decoder.up." + std::to_string(up - 1 - lvl) + o.substr(o.find('.', 18));
            o = replace(o, ".resnets.", ".block.");
            o = replace(o, ".upsamplers.0.", ".upsample.");
        } else if (o.find(".mid_block.") != std::string::npos) {
            o = replace(o, "mid_block.resnets.0.", "mid.block_1.");
            o = replace(o, "mid_block.resnets.1.", "mid.block_2.");
            o = replace(o, "mid_block.attentions.0.group_norm.", "mid.attn_1.norm.");
            for (const char* p : {"q", "k", "v"})
                o = replace(o, std::string("mid_block.attentions.0.to_") + p + ".",
                            std::string("mid.attn_1.") + p + ".");
            o = replace(o, "mid_block.attentions.0.to_out.0.", "mid.attn_1.proj_out.");
            if (o.find("mid.attn_1.") != std::string::npos && t.shape.size() == 2)
                t.shape.insert(t.shape.end(), {1, 1});
        }
        o = replace(o, ".conv_shortcut.", ".nin_shortcut.");
        o = replace(o, "coder.conv_norm_out.", "coder.norm_out.");
        out[o] = t;
    }
    write(path, out, "");
}

void write_qwen3_transformers(const std::string& c, const std::string& path, bool model_prefix, bool lm_head) {
    const SafeTensors src = fixture(c, "text_encoder");
    Tensors out;
    for (const auto& i : src.tensors()) {
        const std::string bare = i.name.rfind("model.", 0) == 0 ? i.name.substr(6) : i.name;
        out[(model_prefix ? "model." : "") + bare] = src.read(i.name);
        if (lm_head && bare == "embed_tokens.weight") out["lm_head.weight"] = src.read(i.name);  // tied
    }
    write(path, out, "");
}

void write_qwen3_gguf(const std::string& c, const std::string& path, DType matrix) {
    const SafeTensors src = fixture(c, "text_encoder");
    static const std::pair<const char*, const char*> names[] = {
        {"input_layernorm.", "attn_norm."},    {"self_attn.q_norm.", "attn_q_norm."},
        {"self_attn.k_norm.", "attn_k_norm."}, {"self_attn.q_proj.", "attn_q."},
        {"self_attn.k_proj.", "attn_k."},      {"self_attn.v_proj.", "attn_v."},
        {"self_attn.o_proj.", "attn_output."}, {"post_attention_layernorm.", "ffn_norm."},
        {"mlp.gate_proj.", "ffn_gate."},       {"mlp.up_proj.", "ffn_up."},
        {"mlp.down_proj.", "ffn_down."},
    };
    GgufWriter w;
    w.set_string("general.architecture", "qwen3");
    auto put = [&](const std::string& name, const Tensor& v) {
        const DType t = v.shape.size() == 2 ? matrix : DType::f32;  // llama.cpp keeps norms in f32
        const Tensor f = v;
        w.add_tensor(name, t, v.shape, [f, t](void* dst) {
            const std::vector<float> x = f.to_f32();
            if (t == DType::f32)
                std::memcpy(dst, x.data(), x.size() * 4);
            else if (t == DType::f16)
                for (size_t i = 0; i < x.size(); ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(x[i]);
            else
                quantize(x.data(), t, dst, x.size());
        });
    };
    for (const auto& i : src.tensors()) {
        const std::string bare = i.name.rfind("model.", 0) == 0 ? i.name.substr(6) : i.name;
        const Tensor v = src.read(i.name);
        if (bare == "embed_tokens.weight") {
            put("token_embd.weight", v);
            put("output.weight", v);
        } else if (bare == "norm.weight") {
            put("output_norm.weight", v);
        } else {
            const size_t dot = bare.find('.', 7);  // layers.N.
            const std::string idx = bare.substr(7, dot - 7), rest = bare.substr(dot + 1);
            std::string o;
            for (const auto& [f, to] : names)
                if (rest.rfind(f, 0) == 0) o = "blk." + idx + "." + to + rest.substr(std::strlen(f));
            KILN_CHECK(!o.empty(), "write_qwen3_gguf: no llama.cpp name for ", i.name);
            put(o, v);
        }
    }
    w.write(path);
}

}  // namespace kiln::test
