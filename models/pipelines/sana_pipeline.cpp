#include "models/pipelines/sana_pipeline.h"

#include <cstring>

#include "models/pipelines/text_encode.h"
#include "runtime/core/error.h"

namespace kiln::models {

const std::string& sana_default_instruction() {
    // pipeline_sana.py's complex_human_instruction default (also SanaSprintPipeline's), joined by "\n".
    static const std::string s =
        "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual descriptions suitable for "
        "image generation. Evaluate the level of detail in the user prompt:\n"
        "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, and spatial "
        "relationships to create vivid and concrete scenes.\n"
        "- If the prompt is already detailed, refine and enhance the existing details slightly without "
        "overcomplicating.\n"
        "Here are examples of how to transform or refine prompts:\n"
        "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat curled up in a round shape, sleeping "
        "peacefully on a warm sunny windowsill, surrounded by pots of blooming red flowers.\n"
        "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, featuring glowing street "
        "lamps, a diverse crowd of people in colorful clothing, and a double-decker bus passing by towering glass "
        "skyscrapers.\n"
        "Please generate only the enhanced description for the prompt below and avoid including any additional "
        "commentary or evaluations:\n"
        "User Prompt: ";
    return s;
}

SanaTokens sana_tokenize(const text::Tokenizer& tok, const std::vector<std::string>& prompts, int max_sequence_length,
                         const std::string& instruction, const std::function<void(const std::string&)>& warn) {
    const int M = max_sequence_length;
    KILN_CHECK(M >= 2, "max_sequence_length ", M, " must be at least 2 (<bos> and one token)");
    SanaTokens t;
    // len(tokenizer.encode(chi_prompt)): with <bos>, untruncated
    if (!instruction.empty()) t.n_chi = (int)tok.encode(instruction, 0, false).ids.size();
    const int L = instruction.empty() ? M : t.n_chi + M - 2;
    const int64_t B = (int64_t)prompts.size();
    t.ids = Tensor(DType::i64, {B, L});
    t.mask = Tensor(DType::i64, {B, L});
    for (int64_t b = 0; b < B; ++b) {
        text::check_utf8(prompts[(size_t)b], "prompt " + std::to_string(b));
        const std::string text = instruction + python_lower_strip(prompts[(size_t)b]);
        const text::Tokens k = tok.encode(text, L, true);
        KILN_CHECK((int)k.ids.size() == L, "Sana: the tokenizer returned ", k.ids.size(), " ids, expected ", L);
        if (k.untruncated > (size_t)L && warn) {
            // diffusers truncates silently; the count is in prompt tokens, as max_sequence_length counts them
            const size_t own = k.untruncated - (size_t)(instruction.empty() ? 0 : t.n_chi - 1);
            warn("text_encoder: prompt " + std::to_string(b) + " has " + std::to_string(own) +
                 " tokens; truncated to max_sequence_length " + std::to_string(M) + " (as diffusers does)");
        }
        for (int i = 0; i < L; ++i) {
            t.ids.data<int64_t>()[b * L + i] = k.ids[(size_t)i];
            t.mask.data<int64_t>()[b * L + i] = k.mask[(size_t)i];
        }
    }
    return t;
}

Tensor sana_select(const Tensor& x, int max_sequence_length) {
    const int64_t M = max_sequence_length;
    KILN_CHECK(x.shape.size() >= 2 && x.shape[1] >= M && M >= 1, "Sana: select_index of ", M,
               " positions from a tensor of shape ", shape_str(x.shape));
    const int64_t B = x.shape[0], L = x.shape[1];
    const size_t row = x.nbytes() / (size_t)(B * L);  // bytes per position
    Shape s = x.shape;
    s[1] = M;
    Tensor out(x.dtype, s);
    for (int64_t b = 0; b < B; ++b) {
        const uint8_t* src = x.bytes.data() + (size_t)(b * L) * row;
        uint8_t* dst = out.bytes.data() + (size_t)(b * M) * row;
        std::memcpy(dst, src, row);                                                        // position 0: <bos>
        std::memcpy(dst + row, src + (size_t)(L - (M - 1)) * row, (size_t)(M - 1) * row);  // the last M - 1
    }
    return out;
}

Tensor sana_guidance_input(const ModelSource& src, double guidance_scale, int64_t rows) {
    const auto& c = src.config("transformer");
    const double scale = c.value("guidance_embeds_scale", 0.1);
    // torch.full([1], g, float32).expand(B) * guidance_embeds_scale: float32 product
    const float g = (float)guidance_scale * (float)scale;
    Tensor t(DType::f32, {rows});
    for (int64_t i = 0; i < rows; ++i) t.data<float>()[i] = g;
    return t;
}

void given_step_noise(std::vector<std::vector<float>>& step_noise, const std::map<std::string, Tensor>& given,
                      const Shape& latents) {
    const std::string prefix = "scm_noise_step";
    for (const auto& [name, t] : given) {
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string digits = name.substr(prefix.size());
        KILN_CHECK(!digits.empty() && digits.size() < 6 && digits.find_first_not_of("0123456789") == std::string::npos,
                   "noise: '", name, "' is not scm_noise_step{i}");
        const size_t i = (size_t)std::stoi(digits);
        KILN_CHECK(i < step_noise.size(), "noise: ", name, " given, but this call draws ", step_noise.size(),
                   " step noises (", step_noise.empty() ? "its scheduler adds none" : "one per step", ")");
        KILN_CHECK(t.shape == latents, "noise: ", name, " has shape ", shape_str(t.shape), ", this call draws ",
                   shape_str(latents));
        const Tensor f = t.astype(DType::f32);
        step_noise[i].assign(f.data<float>(), f.data<float>() + f.numel());
    }
}

}  // namespace kiln::models
