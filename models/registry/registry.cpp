#include "models/registry/registry.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace kiln::models {

namespace {
using K = ComponentKind;
}  // namespace

const std::vector<ComponentClass>& component_classes() {
    static const std::vector<ComponentClass> v = {
        {"DiTTransformer2DModel", K::dit, Role::transformer},  // diffusers dit_transformer_2d.py
        {"PixArtTransformer2DModel", K::pixart, Role::transformer},
        {"SD3Transformer2DModel", K::sd3, Role::transformer},
        {"FluxTransformer2DModel", K::flux, Role::transformer},
        {"SanaTransformer2DModel", K::sana, Role::transformer},       // diffusers sana_transformer.py
        {"Flux2Transformer2DModel", K::flux2, Role::transformer},     // diffusers transformer_flux2.py
        {"ZImageTransformer2DModel", K::z_image, Role::transformer},  // diffusers transformer_z_image.py
        {"AutoencoderKL", K::vae, Role::vae},
        {"AutoencoderKLFlux2", K::vae_flux2, Role::vae},      // diffusers autoencoder_kl_flux2.py
        {"AutoencoderDC", K::dc_ae, Role::vae},               // diffusers autoencoder_dc.py
        {"CLIPTextModel", K::clip_text, Role::text_encoder},  // transformers modeling_clip.py
        {"CLIPTextModelWithProjection", K::clip_text_projection, Role::text_encoder},
        {"T5EncoderModel", K::t5_encoder, Role::text_encoder},         // transformers modeling_t5.py
        {"Gemma2Model", K::gemma2, Role::text_encoder},                // transformers modeling_gemma2.py
        {"Qwen3Model", K::qwen3, Role::text_encoder},                  // transformers modeling_qwen3.py
        {"Qwen3ForCausalLM", K::qwen3, Role::text_encoder, "model."},  // its `model`; the LM head is unused
        // Fast tokenizers load from the same files (Kiln reads the slow tokenizers' files and runs them).
        {"CLIPTokenizer", K::clip_tokenizer, Role::tokenizer},
        {"CLIPTokenizerFast", K::clip_tokenizer, Role::tokenizer},
        {"T5Tokenizer", K::t5_tokenizer, Role::tokenizer},
        {"T5TokenizerFast", K::t5_tokenizer, Role::tokenizer},
        {"GemmaTokenizer", K::gemma_tokenizer, Role::tokenizer},  // transformers tokenization_gemma.py
        {"GemmaTokenizerFast", K::gemma_tokenizer, Role::tokenizer},
        {"Qwen2Tokenizer", K::qwen2_tokenizer, Role::tokenizer},  // transformers tokenization_qwen2.py
        {"Qwen2TokenizerFast", K::qwen2_tokenizer, Role::tokenizer},
    };
    return v;
}

const ComponentClass* find_component_class(std::string_view name) {
    for (const auto& c : component_classes())
        if (name == c.name) return &c;
    return nullptr;
}

const char* class_name(ComponentKind kind) {
    for (const auto& c : component_classes())
        if (c.kind == kind) return c.name;
    KILN_FAIL("internal: component kind ", (int)kind, " has no class");
}

Role role_of(ComponentKind kind) {
    for (const auto& c : component_classes())
        if (c.kind == kind) return c.role;
    KILN_FAIL("internal: component kind ", (int)kind, " has no class");
}

std::string class_list(const std::vector<Role>& roles) {
    std::string s;
    for (const auto& c : component_classes()) {
        bool listed = roles.empty();
        for (Role r : roles) listed |= r == c.role;
        if (listed) s += (s.empty() ? "" : ", ") + std::string(c.name);
    }
    return s;
}

const std::vector<TokenizerFormat>& tokenizer_formats() {
    static const std::vector<TokenizerFormat> v = {
        {K::clip_tokenizer, {"vocab.json", "merges.txt"}},   // byte-level BPE (models/text/tokenizers/clip_tokenizer.h)
        {K::t5_tokenizer, {"spiece.model"}},                 // SentencePiece unigram
        {K::gemma_tokenizer, {"tokenizer.model"}},           // SentencePiece BPE with byte fallback
        {K::qwen2_tokenizer, {"vocab.json", "merges.txt"}},  // byte-level BPE, Qwen's regex (CLIP's files: by class)
    };
    return v;
}

const TokenizerFormat& tokenizer_format(ComponentKind kind) {
    for (const auto& f : tokenizer_formats())
        if (f.kind == kind) return f;
    KILN_FAIL("internal: component kind ", (int)kind, " is not a tokenizer");
}

const std::vector<std::string>& tokenizer_shared_files() {
    static const std::vector<std::string> v = {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"};
    return v;
}

const std::vector<std::string>& tokenizer_file_names() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> names;
        for (const auto& f : tokenizer_formats())
            for (const auto& n : f.model_files)
                if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        for (const auto& n : tokenizer_shared_files()) names.push_back(n);
        return names;
    }();
    return v;
}

std::string tokenizer_class_of(const std::string& config_class,
                               const std::function<bool(const std::string&)>& present) {
    if (!config_class.empty()) return config_class;
    for (const auto& f : tokenizer_formats())
        if (missing_tokenizer_files(f.kind, present).empty()) return class_name(f.kind);
    return "";
}

std::string missing_tokenizer_files(ComponentKind kind, const std::function<bool(const std::string&)>& present) {
    const TokenizerFormat& f = tokenizer_format(kind);
    std::string needs, missing;
    for (size_t i = 0; i < f.model_files.size(); ++i) {
        needs += (i == 0 ? "" : i + 1 == f.model_files.size() ? " and " : ", ") + f.model_files[i];
        if (!present(f.model_files[i])) missing += (missing.empty() ? "" : ", ") + f.model_files[i];
    }
    if (missing.empty()) return "";
    return std::string(class_name(kind)) + " needs " + needs + "; missing " + missing;
}

const std::vector<Family>& families() {
    static const std::vector<Family> v = [] {
        std::vector<Family> f(8);
        // diffusers pipeline_dit.py: class labels, guidance against the null class 1000.
        Family& dit = f[0];
        dit.id = FamilyId::dit;
        dit.name = "DiT";
        dit.pipelines = {{"DiTPipeline"}};
        dit.transformer = K::dit;
        dit.steps = 25, dit.guidance = 4.0;
        dit.conditioning = Conditioning::class_labels;

        // pipeline_pixart_sigma.py / pipeline_pixart_alpha.py: T5 with its mask, max_sequence_length 300 / 120.
        Family& pixart = f[1];
        pixart.id = FamilyId::pixart;
        pixart.name = "PixArt";
        pixart.pipelines = {{"PixArtSigmaPipeline", 300}, {"PixArtAlphaPipeline", 120, true}};
        pixart.transformer = K::pixart;
        pixart.steps = 20, pixart.guidance = 4.5;
        pixart.attention_mask = true;
        pixart.encoders = {{"text_encoder", K::t5_encoder, 1, 0}};
        pixart.encoders_summary = "one text encoder (T5)";
        pixart.eta = pixart.custom_timesteps = pixart.custom_sigmas = pixart.resolution_binning = true;
        pixart.bin_sample_sizes = {32, 64, 128, 256};  // ASPECT_RATIO_{256,512,1024,2048}_BIN

        // pipeline_stable_diffusion_3.py: CLIP-L, CLIP-G and (optional) T5; pooled CLIP embeddings.
        Family& sd3 = f[2];
        sd3.id = FamilyId::sd3;
        sd3.name = "Stable Diffusion 3";
        sd3.pipelines = {{"StableDiffusion3Pipeline", 256}};
        sd3.transformer = K::sd3;
        sd3.steps = 28, sd3.guidance = 7.0;
        sd3.pooled_projections = true;
        sd3.flow_matching = true, sd3.max_shift_default = 1.16;
        sd3.vae_shift = true;
        sd3.encoders = {{"text_encoder", K::clip_text_projection, 1, 77, false, "clip_l"},
                        {"text_encoder_2", K::clip_text_projection, 2, 77, false, "clip_g"},
                        {"text_encoder_3", K::t5_encoder, 3, 0, true, "t5xxl"}};
        sd3.encoders_summary = "three text encoders (CLIP-L, CLIP-G, then T5 which reads prompt_3)";
        sd3.clip_skip = sd3.skip_layer_guidance = sd3.custom_sigmas = true;
        sd3.img2img_pipeline = "StableDiffusion3Img2ImgPipeline";
        sd3.inpaint_pipeline = "StableDiffusion3InpaintPipeline";

        // pipeline_flux.py: CLIP pooled, T5 sequence; 2x2-packed latents; embedded guidance, true CFG.
        Family& flux = f[3];
        flux.id = FamilyId::flux;
        flux.name = "Flux";
        flux.pipelines = {{"FluxPipeline", 512}, {"FluxKontextPipeline", 512}};
        flux.schnell_max_sequence_length = 256;  // FLUX.1-schnell (no guidance embedding) was trained with 256
        flux.transformer = K::flux;
        flux.steps = 28, flux.guidance = 3.5;
        flux.default_sample_size = 128;  // FluxPipeline.default_sample_size
        flux.packed_2x2 = flux.round_size_down = true;
        flux.conditioning = Conditioning::embedded;
        flux.pooled_projections = true;
        flux.timestep_fraction = true;
        flux.flow_matching = true, flux.max_shift_default = 1.15;
        flux.linspace_sigmas = flux.vae_shift = true;
        flux.encoders = {{"text_encoder", K::clip_text, 1, 77, false, "clip_l"},
                         {"text_encoder_2", K::t5_encoder, 2, 0, false, "t5xxl"}};
        flux.encoders_summary = "two text encoders (CLIP, then T5 which reads prompt_2)";
        flux.img2img_pipeline = "FluxImg2ImgPipeline";
        flux.inpaint_pipeline = "FluxInpaintPipeline";
        flux.fill_pipeline = "FluxFillPipeline";
        flux.kontext_pipeline = "FluxKontextPipeline";
        flux.kontext_resolutions = {{672, 1568}, {688, 1504}, {720, 1456},  {752, 1392}, {800, 1328}, {832, 1248},
                                    {880, 1184}, {944, 1104}, {1024, 1024}, {1104, 944}, {1184, 880}, {1248, 832},
                                    {1328, 800}, {1392, 752}, {1456, 720},  {1504, 688}, {1568, 672}};
        flux.true_cfg = flux.custom_sigmas = true;

        // pipeline_sana.py: Gemma-2 (last hidden state, with the complex_human_instruction), its mask to the
        // transformer, classifier-free guidance against the negative prompt (no instruction), flow DPM-Solver++.
        // use_resolution_binning (diffusers' default True) is handled as PixArt's: the identity at the square bin
        // side, else a warning and the requested size.
        Family& sana = f[4];
        sana.id = FamilyId::sana;
        sana.name = "Sana";
        sana.pipelines = {{"SanaPipeline", 300}};
        sana.transformer = K::sana;
        sana.steps = 20, sana.guidance = 4.5;
        sana.attention_mask = true;
        sana.complex_human_instruction = true;
        sana.encoders = {{"text_encoder", K::gemma2, 1, 0}};
        sana.encoders_summary = "one text encoder (Gemma-2)";
        sana.timestep_scale = true;
        sana.resolution_binning = true;
        sana.bin_sample_sizes = {16, 32, 64, 128};  // ASPECT_RATIO_{512,1024,2048,4096}_BIN

        // pipeline_sana_sprint.py: Sana's prompt path without a negative prompt; SCMScheduler (trigflow), 2 steps
        // (max_timesteps 1.5708, intermediate_timesteps 1.3: scheduler config fields in Kiln); guidance embedded.
        Family& sprint = f[5];
        sprint.id = FamilyId::sana_sprint;
        sprint.name = "Sana-Sprint";
        sprint.pipelines = {{"SanaSprintPipeline", 300}};
        sprint.transformer = K::sana;
        sprint.steps = 2, sprint.guidance = 4.5;
        sprint.conditioning = Conditioning::embedded;
        sprint.attention_mask = true;
        sprint.complex_human_instruction = true;
        sprint.scaled_guidance_input = true;
        sprint.encoders = sana.encoders;
        sprint.encoders_summary = sana.encoders_summary;
        sprint.resolution_binning = true;
        sprint.bin_sample_sizes = sana.bin_sample_sizes;

        // pipeline_z_image.py: Qwen3 hidden_states[-2] of the chat-templated prompt (thinking on), each prompt's
        // unmasked rows; its own loop (models/pipelines/z_image_pipeline.h); the FLUX.1 KL VAE with scaling and shift.
        Family& zi = f[6];
        zi.id = FamilyId::z_image;
        zi.name = "Z-Image";
        zi.pipelines = {{"ZImagePipeline", 512}};
        zi.transformer = K::z_image;
        zi.steps = 50, zi.guidance = 5.0;
        zi.default_size_pixels = 1024;  // ZImagePipeline: height = height or 1024
        zi.flow_matching = true, zi.max_shift_default = 1.15;
        zi.vae_shift = zi.custom_sigmas = true;
        zi.encoders = {{"text_encoder", K::qwen3, 1, 0, false, "llm"}};
        zi.encoders_summary = "one text encoder (Qwen3)";
        zi.chat_template = ChatTemplate::qwen_thinking;
        zi.text_encoder_layers = {-2};
        zi.z_image_loop = true;

        // pipeline_flux2_klein.py: Qwen3 hidden_states 9, 18, 27 stacked on features, every position; 2x2-patchified
        // noise packed into tokens; 4-axis ids; empirical mu; CFG with "" unless distilled; BatchNorm-denormalised
        // latents for AutoencoderKLFlux2.
        Family& kl = f[7];
        kl.id = FamilyId::flux2_klein;
        kl.name = "FLUX.2 [klein]";
        kl.pipelines = {{"Flux2KleinPipeline", 512}};
        kl.transformer = K::flux2;
        kl.steps = 50, kl.guidance = 4.0;
        kl.default_sample_size = 128;  // Flux2KleinPipeline.default_sample_size
        kl.packed_2x2 = true;          // sizes: multiples of vae_scale_factor x 2 (diffusers rounds with a warning)
        kl.round_size_down = true;
        kl.timestep_fraction = true;
        kl.flow_matching = true, kl.max_shift_default = 1.15;
        kl.linspace_sigmas = kl.custom_sigmas = true;
        kl.encoders = {{"text_encoder", K::qwen3, 1, 0, false, "llm"}};
        kl.encoders_summary = "one text encoder (Qwen3)";
        kl.chat_template = ChatTemplate::qwen_no_thinking;
        kl.text_encoder_layers = {9, 18, 27};
        kl.text_encoder_layers_option = true;
        kl.patchified_noise = kl.empirical_mu = kl.bn_latents = kl.distilled_flag = true;
        return f;
    }();
    return v;
}

const Family& family(FamilyId id) {
    for (const auto& f : families())
        if (f.id == id) return f;
    KILN_FAIL("internal: family ", (int)id, " is not registered");
}

const Family* find_pipeline_family(std::string_view pipeline_class, const PipelineClass** pipeline) {
    for (const auto& f : families())
        for (const auto& p : f.pipelines)
            if (pipeline_class == p.name) {
                if (pipeline) *pipeline = &p;
                return &f;
            }
    return nullptr;
}

const Family* transformer_family(ComponentKind kind) {
    for (const auto& f : families())
        if (f.transformer == kind) return &f;
    return nullptr;
}

const PipelineClass& pipeline_for(const Family& f, bool micro_conditions) {
    for (const auto& p : f.pipelines)
        if (p.micro_conditions == micro_conditions) return p;
    return f.pipelines.front();
}

const Family& family_with(bool Family::*option) {
    for (const auto& f : families())
        if (f.*option) return f;
    KILN_FAIL("internal: no family takes that option");
}

const Family* file_family(std::string_view name) {
    if (name == "flux") return &family(FamilyId::flux);
    if (name == "sd3") return &family(FamilyId::sd3);
    if (name == "z_image") return &family(FamilyId::z_image);
    if (name == "flux2") return &family(FamilyId::flux2_klein);  // FLUX.2 [dev] (Mistral encoder) is not run
    return nullptr;
}

}  // namespace kiln::models
