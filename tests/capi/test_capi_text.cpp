// The C API on a text-to-image pipeline: the PixArt fixture's prompt and initial latents through kiln_generate
// give diffusers' image; text-model argument errors.
#include <cstring>

#include "runtime/core/safetensors.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

TEST_CASE("C API: kiln_generate with a prompt reproduces diffusers' PixArt pipeline", "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/pixart_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    REQUIRE(kiln_model_get_info(m.get(), &info) == KILN_OK);
    CHECK(info.kind == KILN_MODEL_TEXT);
    CHECK(std::string(info.pipeline).rfind("PixArt", 0) == 0);
    CHECK(info.class_count == 0);

    auto io = kiln::SafeTensors::open(dir + "/io.safetensors");
    const kiln::Tensor lat = io.read("latents_init").astype(kiln::DType::f32), ref = io.read("image");
    const char* prompts[1] = {"a red fox in the snow"};  // io.json's prompt and call scalars
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 4;
    p.guidance = 4.5;
    p.width = p.height = 32;
    p.latents = lat.data<float>();
    p.latents_shape = lat.shape.data();
    p.latents_ndim = (int)lat.shape.size();
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(img.width == 32);
    CHECK(img.count == 1);
    std::vector<float> px(img.required_bytes / sizeof(float));
    img.data = px.data();
    img.capacity = img.required_bytes;
    INFO(kiln_last_error());
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    REQUIRE(ref.numel() == (int64_t)px.size());
    // f32 throughout, as the CLI test of the same fixture: summation order only.
    CHECK(kiln::rel_l2(px, ref.to_f32()) <= 1e-4);

    // Text-model argument errors.
    auto expect = [&](kiln_generate_params q, kiln_status want, const char* needle) {
        kiln_image i2 = KILN_IMAGE_INIT;
        kiln_status s = kiln_generate(m.get(), &q, &i2);
        INFO(kiln_last_error());
        CHECK(s == want);
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    kiln_generate_params q = p;
    int labels[1] = {1};
    q.class_labels = labels;
    q.class_label_count = 1;
    expect(q, KILN_INVALID_ARGUMENT, "class_labels do not apply");
    q = p;
    q.prompt_count = 0;
    expect(q, KILN_INVALID_ARGUMENT, "give prompts");
    q = p;
    const char* bad[2] = {"ok", "a \xff cat"};
    q.prompts = bad;
    q.prompt_count = 2;
    q.latents = nullptr;
    expect(q, KILN_INVALID_ARGUMENT, "UTF-8");
    const char* null_prompt[1] = {nullptr};
    q.prompts = null_prompt;
    q.prompt_count = 1;
    expect(q, KILN_INVALID_ARGUMENT, "prompts[0] is NULL");
    q = p;
    q.width = 30;
    q.latents = nullptr;
    expect(q, KILN_INVALID_ARGUMENT, "multiple");
    q = p;
    q.max_sequence_length = -4;
    expect(q, KILN_INVALID_ARGUMENT, "max_sequence_length");

    // timesteps: PixArt's schedule, the step count theirs; the transformer ran at them. Bad lists are named.
    const double ts[3] = {999, 600, 250};
    q = p;
    q.steps = 0;
    q.timesteps = ts;
    q.timestep_count = 3;
    kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
    q.stats = &st;
    kiln_result* r = nullptr;
    q.intermediates = &r;
    REQUIRE(kiln_generate(m.get(), &q, &img) == KILN_OK);
    Result own(r);
    CHECK(st.steps == 3);
    kiln_tensor t;
    REQUIRE(kiln_result_find(r, "timesteps", &t) == KILN_OK);
    REQUIRE(t.ndim == 1);
    REQUIRE(t.shape[0] == 3);
    CHECK(std::vector<float>((const float*)t.data, (const float*)t.data + 3) == std::vector<float>{999, 600, 250});
    q.intermediates = nullptr;
    q.stats = nullptr;
    q.steps = 4;
    expect(q, KILN_INVALID_ARGUMENT, "steps 4 but 3 timesteps");
    q.steps = 0;
    q.timesteps = nullptr;
    expect(q, KILN_INVALID_ARGUMENT, "timesteps / timestep_count (3) do not describe a list");
    const double down_up[2] = {500, 700};
    q.timesteps = down_up;
    q.timestep_count = 2;
    expect(q, KILN_INVALID_ARGUMENT, "decrease strictly");

    // eta reaches DDIM: the steps draw noise (and a negative eta is named).
    q = p;
    q.scheduler = "ddim";
    q.eta = 1;
    kiln_result* re = nullptr;
    q.intermediates = &re;
    REQUIRE(kiln_generate(m.get(), &q, &img) == KILN_OK);
    Result own_e(re);
    CHECK(kiln_result_find(re, "step0_variance_noise", &t) == KILN_OK);
    q.intermediates = nullptr;
    q.eta = -1;
    expect(q, KILN_INVALID_ARGUMENT, "eta is -1");
}

namespace {

// The image of one kiln_generate call (RGB float), with its stats.
std::vector<float> generate_rgb(kiln_model* m, kiln_generate_params p, kiln_generate_stats* stats = nullptr) {
    p.stats = stats;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    INFO(kiln_last_error());
    REQUIRE(kiln_generate(m, &p, &img) == KILN_OK);
    std::vector<float> px(img.required_bytes / sizeof(float));
    img.data = px.data();
    img.capacity = img.required_bytes;
    const kiln_status s = kiln_generate(m, &p, &img);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    return px;
}

}  // namespace

TEST_CASE("C API: prompt_embeds in place of prompts; keep_encoders keeps them resident", "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/pixart_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    auto io = kiln::SafeTensors::open(dir + "/io.safetensors");
    const kiln::Tensor lat = io.read("latents_init").astype(kiln::DType::f32), ref = io.read("image");
    const char* prompts[1] = {"a red fox in the snow"};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 4;
    p.guidance = 4.5;
    p.latents = lat.data<float>();
    p.latents_shape = lat.shape.data();
    p.latents_ndim = (int)lat.shape.size();

    // The prompt run, keeping its intermediates: Kiln's own encode_prompt outputs are among them.
    kiln_result* inter = nullptr;
    kiln_generate_params pi = p;
    pi.intermediates = &inter;
    const std::vector<float> from_prompt = generate_rgb(m.get(), pi);
    std::unique_ptr<kiln_result, decltype(&kiln_result_destroy)> own(inter, kiln_result_destroy);
    std::vector<kiln_tensor> embeds;
    for (const char* n :
         {"prompt_embeds", "negative_prompt_embeds", "prompt_attention_mask", "negative_prompt_attention_mask"}) {
        kiln_tensor t;
        INFO(n);
        REQUIRE(kiln_result_find(inter, n, &t) == KILN_OK);
        embeds.push_back(t);
    }

    kiln_generate_params pe = p;
    pe.prompts = nullptr;
    pe.prompt_count = 0;
    pe.prompt_embeds = embeds.data();
    pe.prompt_embeds_count = (int)embeds.size();
    SECTION("Kiln's own embeddings give the prompt run's image, bit for bit") {
        kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
        CHECK(generate_rgb(m.get(), pe, &st) == from_prompt);
        CHECK(st.encode_ms == 0);  // no encoder ran
    }
    SECTION("diffusers' embeddings give diffusers' image") {
        // The fixture's encode_prompt outputs (f32; the masks I64), converted to caller views.
        std::vector<kiln::Tensor> keep;
        std::vector<std::string> names = {"prompt_embeds", "negative_prompt_embeds", "prompt_attention_mask",
                                          "negative_prompt_attention_mask"};
        std::vector<kiln_tensor> views;
        for (auto& n : names) keep.push_back(io.read(n));
        for (size_t i = 0; i < names.size(); ++i) {
            kiln_tensor v;
            v.name = names[i].c_str();
            v.dtype = keep[i].dtype == kiln::DType::i64 ? KILN_I64 : KILN_F32;
            v.ndim = (int)keep[i].shape.size();
            v.shape = keep[i].shape.data();
            v.data = keep[i].bytes.data();
            views.push_back(v);
        }
        kiln_generate_params q = pe;
        q.prompt_embeds = views.data();
        const std::vector<float> px = generate_rgb(m.get(), q);
        REQUIRE(ref.numel() == (int64_t)px.size());
        CHECK(kiln::rel_l2(px, ref.to_f32()) <= 1e-4);  // f32 throughout: summation order only
    }
    SECTION("keep_encoders: the second call finds them resident; the image is the same") {
        kiln_generate_params k = p;
        k.keep_encoders = 1;
        kiln_generate_stats s1 = KILN_GENERATE_STATS_INIT, s2 = KILN_GENERATE_STATS_INIT, s3 = KILN_GENERATE_STATS_INIT;
        CHECK(generate_rgb(m.get(), k, &s1) == from_prompt);
        CHECK(s1.text_encoders_reused == 0);
        CHECK(s1.text_encoder_bytes > 0);
        CHECK(generate_rgb(m.get(), k, &s2) == from_prompt);
        CHECK(s2.text_encoders_reused == 1);
        k.keep_encoders = 0;  // frees them: the next call plans them again
        CHECK(generate_rgb(m.get(), k, &s3) == from_prompt);
        CHECK(s3.text_encoders_reused == 0);
    }
    SECTION("errors name the problem") {
        auto expect = [&](kiln_generate_params q, const char* needle) {
            kiln_image i2 = KILN_IMAGE_INIT;
            const kiln_status s = kiln_generate(m.get(), &q, &i2);
            INFO(kiln_last_error());
            CHECK(s == KILN_INVALID_ARGUMENT);
            CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
        };
        kiln_generate_params q = pe;
        q.prompts = prompts;
        q.prompt_count = 1;
        expect(q, "not both");
        q = pe;
        q.negative_prompt = "blurry";
        expect(q, "negative_prompt_embeds");
        q = pe;
        q.prompt_embeds_count = 1;  // prompt_embeds only: the mask is missing
        expect(q, "prompt_attention_mask");
        q = pe;
        q.prompt_embeds_count = 3;  // no negative mask, guidance 4.5
        expect(q, "negative_prompt_attention_mask");
        std::vector<kiln_tensor> odd = embeds;
        odd[1].name = "negative_embeds";
        q = pe;
        q.prompt_embeds = odd.data();
        expect(q, "is not one of");
        odd = embeds;
        odd[1].name = "prompt_embeds";
        q.prompt_embeds = odd.data();
        expect(q, "given twice");
        // Without guidance no negatives are needed: 2 tensors are enough.
        q = pe;
        q.guidance = 1;
        std::vector<kiln_tensor> two = {embeds[0], embeds[2]};
        q.prompt_embeds = two.data();
        q.prompt_embeds_count = 2;
        kiln_image i3 = KILN_IMAGE_INIT;
        CHECK(kiln_generate(m.get(), &q, &i3) == KILN_OK);
        CHECK(i3.count == 1);
    }
}

TEST_CASE("C API: images_per_prompt is the prompts repeated, each row n times; encoded once", "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/pixart_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    const char* two[2] = {"a red fox in the snow", "a lighthouse"};
    const char* four[4] = {two[0], two[0], two[1], two[1]};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = two;
    p.prompt_count = 2;
    p.steps = 2;
    p.seed = 7;
    p.images_per_prompt = 2;
    kiln_image q = KILN_IMAGE_INIT;
    REQUIRE(kiln_generate(m.get(), &p, &q) == KILN_OK);  // the size query counts every image
    CHECK(q.count == 4);
    kiln_generate_stats s2 = KILN_GENERATE_STATS_INIT, s4 = KILN_GENERATE_STATS_INIT;
    const std::vector<float> repeated = generate_rgb(m.get(), p, &s2);
    kiln_generate_params r = p;
    r.prompts = four;
    r.prompt_count = 4;
    r.images_per_prompt = 0;  // one each
    const std::vector<float> listed = generate_rgb(m.get(), r, &s4);
    REQUIRE(repeated.size() == 4 * (size_t)q.width * q.height * 3);
    // The same conditioning rows and the same noise (seeded for 4 images): the same pixels, bit for bit.
    CHECK(repeated == listed);
    // Images 0 and 1 share a prompt, not their noise.
    const size_t one = repeated.size() / 4;
    CHECK(
        !std::equal(repeated.begin(), repeated.begin() + (std::ptrdiff_t)one, repeated.begin() + (std::ptrdiff_t)one));
    kiln_generate_params bad = p;
    bad.images_per_prompt = -1;
    q = KILN_IMAGE_INIT;
    CHECK(kiln_generate(m.get(), &bad, &q) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("images_per_prompt is -1") != std::string::npos);
}

TEST_CASE("C API: negative_prompts, prompts_2, prompts_3 and their negatives reach SD3's three encoders",
          "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/sd3_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    // A: the prompts "a cat", "a dog" with every list set. B: A's negative texts as its prompts, so each of A's
    // negative encoder outputs must equal B's positive one bit for bit (same encoder, same token rows).
    const char* prompts[2] = {"a cat", "a dog"};
    const char* negatives[2] = {"blurry", "dark"};
    const char* owl[1] = {"an owl"};
    const char* barn[1] = {"a red barn"};
    kiln_generate_params a = KILN_GENERATE_PARAMS_INIT;
    a.prompts = prompts;
    a.prompt_count = 2;
    a.negative_prompts = negatives;
    a.negative_prompt_count = 2;
    a.prompts_2 = a.negative_prompts_2 = owl;
    a.prompt_2_count = a.negative_prompt_2_count = 1;
    a.prompts_3 = a.negative_prompts_3 = barn;
    a.prompt_3_count = a.negative_prompt_3_count = 1;
    a.steps = 1;
    kiln_generate_params b = a;
    b.prompts = negatives;
    b.negative_prompts = nullptr;
    b.negative_prompt_count = 0;
    auto intermediates = [&](kiln_generate_params p) {
        kiln_result* r = nullptr;
        p.intermediates = &r;
        (void)generate_rgb(m.get(), p);
        return Result(r);
    };
    const Result ra = intermediates(a), rb = intermediates(b);
    auto bytes = [](const Result& r, const std::string& name) {
        kiln_tensor t;
        INFO(name);
        REQUIRE(kiln_result_find(r.get(), name.c_str(), &t) == KILN_OK);
        size_t n = t.dtype == KILN_I64 ? 8 : 4;
        for (int i = 0; i < t.ndim; ++i) n *= (size_t)t.shape[i];
        const auto* p = static_cast<const uint8_t*>(t.data);
        return std::vector<uint8_t>(p, p + n);
    };
    for (const std::string enc : {"text_encoder", "text_encoder_2", "text_encoder_3"}) {
        INFO(enc);
        CHECK(bytes(ra, enc + "_negative_input_ids") == bytes(rb, enc + "_input_ids"));
        if (enc != "text_encoder_3")
            CHECK(bytes(ra, enc + "_negative_penultimate_hidden_state") ==
                  bytes(rb, enc + "_penultimate_hidden_state"));
    }
    // prompts_2 and prompts_3 are both calls' positive texts for CLIP-G and T5; CLIP-L reads the prompts.
    CHECK(bytes(ra, "text_encoder_2_input_ids") == bytes(rb, "text_encoder_2_input_ids"));
    CHECK(bytes(ra, "text_encoder_3_input_ids") == bytes(rb, "text_encoder_3_input_ids"));
    CHECK(bytes(ra, "text_encoder_input_ids") != bytes(rb, "text_encoder_input_ids"));

    auto expect = [&](kiln_generate_params q, const char* needle) {
        kiln_image img = KILN_IMAGE_INIT;  // a size query: checked before any work
        const kiln_status s = kiln_generate(m.get(), &q, &img);
        INFO(kiln_last_error());
        CHECK(s == KILN_INVALID_ARGUMENT);
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    kiln_generate_params q = a;
    q.negative_prompt = "blurry";
    expect(q, "negative_prompt or negative_prompts, not both");
    q = a;
    q.negative_prompt_count = 3;
    const char* three[3] = {"x", "y", "z"};
    q.negative_prompts = three;
    expect(q, "negative_prompt: 3 texts for 2 prompts");
    q = a;
    q.prompts_3 = nullptr;
    expect(q, "prompts_3 / its count (1) do not describe a list");
    q = a;
    const char* null_text[1] = {nullptr};
    q.negative_prompts_2 = null_text;
    expect(q, "negative_prompts_2[0] is NULL");
    auto pixart = open_model(ctx.get(), kiln::test::data_path("fixtures/pixart_pipeline"));
    kiln_image img = KILN_IMAGE_INIT;
    q = a;
    q.negative_prompts_2 = q.negative_prompts_3 = nullptr;
    q.negative_prompt_2_count = q.negative_prompt_3_count = 0;
    q.prompts_3 = nullptr;
    q.prompt_3_count = 0;
    CHECK(kiln_generate(pixart.get(), &q, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("one text encoder (T5)") != std::string::npos);
    q.prompts_2 = nullptr;
    q.prompt_2_count = 0;
    CHECK(kiln_generate(pixart.get(), &q, &img) == KILN_OK);  // negative prompts, one per prompt, apply to PixArt
    CHECK(img.count == 2);
}

TEST_CASE("C API: true_cfg_scale runs Flux's classifier-free guidance only with a negative prompt", "[capi][vulkan]") {
    auto ctx = make_context();
    auto flux = open_model(ctx.get(), kiln::test::data_path("fixtures/flux_pipeline"));
    const char* prompts[1] = {"a castle"};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 1;
    p.true_cfg_scale = 4;
    auto rows = [&](kiln_generate_params q) {  // the guidance batch: rows of step 0's transformer output
        kiln_result* r = nullptr;
        q.intermediates = &r;
        (void)generate_rgb(flux.get(), q);
        Result own(r);
        kiln_tensor t;
        REQUIRE(kiln_result_find(r, "step0_transformer_out", &t) == KILN_OK);
        return t.shape[0];
    };
    CHECK(rows(p) == 1);  // no negative prompt: no CFG, as diffusers
    const char* negs_2[1] = {"blurry"};
    p.negative_prompts_2 = negs_2;  // alone it does not count (diffusers' has_neg_prompt): still no CFG
    p.negative_prompt_2_count = 1;
    CHECK(rows(p) == 1);
    p.negative_prompts_2 = nullptr;
    p.negative_prompt_2_count = 0;
    p.negative_prompt = "blurry";
    CHECK(rows(p) == 2);  // [negative, prompt]
    p.true_cfg_scale = 1;
    CHECK(rows(p) == 1);

    auto sd3 = open_model(ctx.get(), kiln::test::data_path("fixtures/sd3_pipeline"));
    kiln_image img = KILN_IMAGE_INIT;
    p.true_cfg_scale = 2;
    CHECK(kiln_generate(sd3.get(), &p, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("true_cfg_scale applies to Flux") != std::string::npos);
    p.true_cfg_scale = -1;
    CHECK(kiln_generate(flux.get(), &p, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("true_cfg_scale is -1") != std::string::npos);

    // clip_skip: SD3 only (its CLIP encoders have 2 and 3 layers here: at most 1).
    kiln_generate_params c = KILN_GENERATE_PARAMS_INIT;
    c.prompts = prompts;
    c.prompt_count = 1;
    c.steps = 1;
    c.clip_skip = 1;
    CHECK(kiln_generate(flux.get(), &c, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("clip_skip applies to StableDiffusion3Pipeline") != std::string::npos);
    c.clip_skip = 2;
    CHECK(kiln_generate(sd3.get(), &c, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("clip_skip 2 for a CLIP text model of 2 layers") != std::string::npos);

    // Skip-layer guidance: SD3 only, block indices checked; on SD3 the step after the window's start changes.
    const int layers[1] = {0}, bad_layers[1] = {7};
    kiln_generate_params s2 = KILN_GENERATE_PARAMS_INIT;
    s2.prompts = prompts;
    s2.prompt_count = 1;
    s2.steps = 3;
    s2.skip_guidance_layers = layers;
    s2.skip_guidance_layer_count = 1;
    CHECK(kiln_generate(flux.get(), &s2, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("applies to StableDiffusion3Pipeline") != std::string::npos);
    s2.skip_guidance_layers = bad_layers;
    CHECK(kiln_generate(sd3.get(), &s2, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("7 is not a block") != std::string::npos);
    s2.skip_guidance_layers = layers;
    s2.skip_layer_guidance_start = 0.0;
    s2.skip_layer_guidance_stop = 0.5;  // 3 steps: step 1 only
    auto noise1 = [&](kiln_generate_params q) {
        kiln_result* r = nullptr;
        q.intermediates = &r;
        (void)generate_rgb(sd3.get(), q);
        Result own(r);
        kiln_tensor t;
        CHECK(kiln_result_find(r, "step2_skip_layers_out", &t) != KILN_OK);
        REQUIRE(kiln_result_find(r, "step1_noise_pred", &t) == KILN_OK);
        const float* f = (const float*)t.data;
        size_t n = 1;
        for (int d = 0; d < t.ndim; ++d) n *= (size_t)t.shape[d];
        return std::vector<float>(f, f + n);
    };
    const auto with = noise1(s2);
    s2.skip_guidance_layers = nullptr;
    s2.skip_guidance_layer_count = 0;
    CHECK(with != noise1(s2));

    // sigmas: the step count is theirs (the size query fills stats->steps); a count without a list is named.
    const double sigmas[2] = {1.0, 0.5};
    kiln_generate_params s = KILN_GENERATE_PARAMS_INIT;
    s.prompts = prompts;
    s.prompt_count = 1;
    s.sigmas = sigmas;
    s.sigma_count = 2;
    kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
    s.stats = &st;
    CHECK(kiln_generate(sd3.get(), &s, &img) == KILN_OK);
    CHECK(st.steps == 2);
    s.sigmas = nullptr;
    CHECK(kiln_generate(sd3.get(), &s, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("sigmas / sigma_count (2) do not describe a list") != std::string::npos);
}
