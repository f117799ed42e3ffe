#include "models/text/encoders/qwen3.h"

#include <cmath>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

DecoderLlmConfig qwen3_config(const nlohmann::json& j, const std::string& cls) {
    KILN_CHECK(j.is_object(), cls, ": config.json is not an object");
    const ComponentClass* k = find_component_class(cls);
    KILN_CHECK(k && k->kind == ComponentKind::qwen3, "internal: '", cls, "' is not a Qwen3 class");
    auto get = [&](const char* key, auto def) { return config_value(j, key, def); };
    DecoderLlmConfig c;  // transformers' Qwen3Config defaults
    c.cls = cls;
    c.prefix = k->weights_prefix;
    c.region_kind = "qwen3_layers";
    c.vocab_size = get("vocab_size", 151936);
    c.hidden_size = get("hidden_size", 4096);
    c.intermediate_size = get("intermediate_size", 22016);
    c.layers = get("num_hidden_layers", 32);
    c.heads = get("num_attention_heads", 32);
    c.kv_heads = get("num_key_value_heads", c.heads);  // None: multi-head attention
    c.head_dim = get("head_dim", 128);                 // explicit: heads * head_dim may differ from hidden_size
    c.rms_norm_eps = (float)get("rms_norm_eps", 1e-6);
    c.rope_theta = get("rope_theta", 10000.0);
    c.attention_bias = get("attention_bias", false);
    c.attn_scale = c.head_dim > 0 ? std::pow((double)c.head_dim, -0.5) : 0;  // Qwen3Attention.scaling
    c.qk_norm = true;

    const std::string act = get("hidden_act", std::string("silu"));
    KILN_CHECK(act == "silu" || act == "swish", cls, ": hidden_act '", act, "' is not supported (silu)");
    // Qwen3 layers are sliding only with use_sliding_window (layer_types then says which); no released model is.
    KILN_CHECK(!get("use_sliding_window", false), cls, ": use_sliding_window true is not supported");
    if (j.contains("layer_types") && j["layer_types"].is_array())
        for (const auto& t : j["layer_types"])
            KILN_CHECK(t == "full_attention", cls, ": layer_types entry ", t.dump(),
                       " is not supported (full_attention)");
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
        const auto& r = j["rope_scaling"];
        const nlohmann::json type = r.is_object() ? r.value("rope_type", r.value("type", nlohmann::json())) : r;
        KILN_CHECK(type == "default", cls, ": rope_scaling ", r.dump(),
                   " is not supported (null or rope_type default)");
    }
    c.check();
    return c;
}

}  // namespace kiln::models
