// city96-style GGUF files under diffusers' names: the stored type of each tensor as io.json lists it, values within
// the quantization's bound of the diffusers weights; a T5 GGUF in llama.cpp's names.
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/quant.h"
#include "tests/layouts/layouts_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Bound for a Q8_0 value of weight x (block of 32, stored scale D = f16(d), d = amax' / 127 in f32, q = round(x'/d)):
//   x' = f16(x) (city96's F16 intermediate), |x - x'| <= 2^-11 |x| <= 2^-11 * 127 d   (RNE, half an f16 ulp)
//   |x' - q d| <= d / 2                                                               (rounding to the step)
//   |q d - q D| <= 127 |d - D| <= 127 * 2^-11 d                                       (scale stored as f16)
// so |x - q D| <= d (1/2 + 2 * 127 / 2048) ~= 0.624 d, with d <= D / (1 - 2^-11); plus 2^-24 for f16 subnormals.
// A value from the wrong row or block is off by up to 127 d: the bound tells them apart.
float q8_0_bound(float D) { return D * (0.5f + 2.f * 127.f / 2048.f) * (1.f + 1.f / 1024.f) + 0x1p-24f; }

// Checks stored values against the f32 reference: F32 bitwise, F16 equal to the reference rounded to f16 (what
// torch's .half() stores), Q8_0 within q8_0_bound of each block's scale. Returns the Q8_0 values checked.
size_t check_values(const Tensor& got, const Tensor& ref) {
    REQUIRE(ref.dtype == DType::f32);
    const float* r = ref.data<float>();
    const size_t n = (size_t)ref.numel();
    if (got.dtype == DType::f32) {
        CHECK(got.bytes == ref.bytes);
    } else if (got.dtype == DType::f16) {
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += got.data<uint16_t>()[i] != f32_to_f16(r[i]);
        CHECK(bad == 0);
    } else {
        REQUIRE(got.dtype == DType::q8_0);
        std::vector<float> v(n);
        dequantize(got.bytes.data(), DType::q8_0, v.data(), n);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
            uint16_t d16;
            std::memcpy(&d16, got.bytes.data() + (i / 32) * 34, 2);  // block: f16 d, i8 q[32]
            bad += std::fabs(v[i] - r[i]) > q8_0_bound(f16_to_f32(d16));
        }
        CHECK(bad == 0);
        return n;
    }
    return 0;
}

}  // namespace

TEST_CASE("layouts: city96 Flux GGUF (Q8_0, Q4_K_S) under diffusers names", "[layouts][gguf]") {
    auto j = io_json("flux");
    SafeTensors ref = SafeTensors::open(folder("flux", "transformer"));
    for (std::string f : {"flux1-tiny-Q8_0.gguf", "flux1-tiny-Q4_K_S.gguf"}) {
        INFO(f);
        auto set = layouts::open_component(single("flux", f), "transformer");
        // The names and shapes of the diffusers folder, no more.
        REQUIRE(set->tensors().size() == ref.tensors().size());
        for (const auto& t : ref.tensors()) {
            INFO(t.name);
            REQUIRE(set->find(t.name));
            CHECK(set->find(t.name)->shape == t.shape);
        }
        // Stored types per io.json (by file key), values per type; views read the same bytes, quantized rows too.
        const auto& types = j["files"][f]["tensor_types"];
        size_t quantized = 0, want_quantized = 0;
        for (const auto& e : j["files"]["flux1-tiny.safetensors"]["key_map"]) {
            const DType want = parse_dtype(types[e["file_key"].get<std::string>()].get<std::string>());
            for (const auto& n : e["diffusers"]) {
                INFO(n.get<std::string>());
                CHECK(set->find(n)->dtype == want);
                quantized += check_values(set->read(n), ref.read(n));
                if (want == DType::q8_0) want_quantized += (size_t)shape_numel(set->find(n)->shape);
            }
        }
        CHECK(quantized == want_quantized);
        CHECK((want_quantized > 0) == (f == "flux1-tiny-Q8_0.gguf"));
        CHECK(check_views(*set) == set->tensors().size() - 2);  // all but norm_out.linear's swapped weight, bias
    }
}

namespace {

// transformers' T5 encoder name -> llama.cpp's (llama-arch.cpp LLM_ARCH_T5ENCODER).
std::string llama_name(const std::string& n) {
    if (n == "shared.weight") return "token_embd.weight";
    if (n == "encoder.final_layer_norm.weight") return "enc.output_norm.weight";
    static const std::vector<std::pair<std::string, std::string>> m = {
        {"layer.0.SelfAttention.relative_attention_bias", "attn_rel_b"},
        {"layer.0.SelfAttention.q", "attn_q"},
        {"layer.0.SelfAttention.k", "attn_k"},
        {"layer.0.SelfAttention.v", "attn_v"},
        {"layer.0.SelfAttention.o", "attn_o"},
        {"layer.0.layer_norm", "attn_norm"},
        {"layer.1.DenseReluDense.wi_0", "ffn_gate"},
        {"layer.1.DenseReluDense.wi_1", "ffn_up"},
        {"layer.1.DenseReluDense.wo", "ffn_down"},
        {"layer.1.layer_norm", "ffn_norm"}};
    // encoder.block.N.<m>.weight
    auto p = n.find('.', 14);
    std::string blk = n.substr(14, p - 14), rest = n.substr(p + 1);
    for (const auto& [from, to] : m)
        if (rest == from + ".weight") return "enc.blk." + blk + "." + to + ".weight";
    FAIL("no llama.cpp name for " << n);
    return "";
}

}  // namespace

TEST_CASE("layouts: T5 GGUF in llama.cpp names (t5encoder)", "[layouts][gguf]") {
    TempDir dir("kiln_layouts");
    const std::string path = dir / "t5-tiny-Q8_0.gguf";
    SafeTensors ref = SafeTensors::open(folder("flux", "text_encoder_2"));
    // Types as llama.cpp's quantizer gives them for rows of 48 / 96: Q8_0 where rows are whole 32-blocks (wo),
    // F16 for the embedding, F32 for the rest.
    GgufWriter w;
    w.set_string("general.architecture", "t5encoder");
    std::map<std::string, DType> stored;
    for (const auto& t : ref.tensors()) {
        DType dt = t.name == "shared.weight"                         ? DType::f16
                   : t.shape.size() == 2 && t.shape.back() % 32 == 0 ? DType::q8_0
                                                                     : DType::f32;
        stored[t.name] = dt;
        Tensor v = ref.read(t.name);
        w.add_tensor(llama_name(t.name), dt, t.shape, [v, dt](void* dst) {
            if (dt == DType::q8_0)
                quantize(v.data<float>(), dt, dst, (size_t)v.numel());
            else
                convert(v.bytes.data(), DType::f32, dst, dt, (size_t)v.numel());
        });
    }
    w.write(path);

    auto fi = layouts::inspect(path);
    CHECK(fi.gguf_architecture == "t5encoder");
    REQUIRE(fi.components.size() == 1);
    CHECK(fi.components[0].role == "t5xxl");
    CHECK(fi.components[0].layout == "city96");
    CHECK(fi.dtype_counts == std::map<std::string, size_t>{{"f16", 1}, {"f32", 18}, {"q8_0", 2}});

    auto set = layouts::open_component(path, "t5xxl");
    REQUIRE(set->tensors().size() == ref.tensors().size());
    size_t quantized = 0;
    for (const auto& t : ref.tensors()) {
        INFO(t.name);
        REQUIRE(set->find(t.name));
        CHECK(set->find(t.name)->shape == t.shape);
        CHECK(set->find(t.name)->dtype == stored[t.name]);
        // Kiln's quantizer works from the f32 values (no f16 intermediate): within the same (looser) bound.
        quantized += check_values(set->read(t.name), ref.read(t.name));
    }
    CHECK(quantized == 2 * 48 * 96);  // the two wo
    CHECK(check_views(*set) == ref.tensors().size());
}

TEST_CASE("layouts: row ranges of K-quant and Q8_0 fused tensors are whole blocks", "[layouts][gguf]") {
    // A Flux-shaped GGUF with 256-wide rows (real FLUX.1's blocks are 3072 wide): qkv [3 D, 256] in Q4_K / Q6_K /
    // Q8_0, linear1 [3 D + 4 D, 256]. Each split part is the fused tensor's rows, byte for byte, and dequantizes to
    // the same values as those rows of the whole (blocks never straddle a row).
    const int64_t D = 8, C = 256;
    for (DType dt : {DType::q4_k, DType::q6_k, DType::q8_0}) {
        INFO(dtype_name(dt));
        TempDir dir("kiln_layouts");
        const std::string path = dir / "flux-kquant.gguf";
        Tensor qkv = random_tensor({3 * D, C}, 1), l1 = random_tensor({7 * D, C}, 2), in = random_tensor({D, 64}, 3);
        GgufWriter w;
        w.set_string("general.architecture", "flux");
        auto put = [&](const std::string& n, DType t, const Tensor& v) {
            w.add_tensor(n, t, v.shape, [v, t](void* dst) {
                if (dtype_is_quant(t))
                    quantize(v.data<float>(), t, dst, (size_t)v.numel());
                else
                    std::memcpy(dst, v.bytes.data(), v.nbytes());
            });
        };
        put("img_in.weight", DType::f32, in);
        put("double_blocks.0.img_attn.qkv.weight", dt, qkv);
        put("single_blocks.0.linear1.weight", dt, l1);
        w.write(path);

        auto set = layouts::open_component(path, "transformer");
        CHECK(set->tensors().size() == 8);
        GgufFile g = GgufFile::open(path);
        for (const auto& [fused, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
                 {"double_blocks.0.img_attn.qkv.weight",
                  {"transformer_blocks.0.attn.to_q.weight", "transformer_blocks.0.attn.to_k.weight",
                   "transformer_blocks.0.attn.to_v.weight"}},
                 {"single_blocks.0.linear1.weight",
                  {"single_transformer_blocks.0.attn.to_q.weight", "single_transformer_blocks.0.attn.to_k.weight",
                   "single_transformer_blocks.0.attn.to_v.weight", "single_transformer_blocks.0.proj_mlp.weight"}}}) {
            Tensor whole = g.read(fused);
            std::vector<float> all = whole.to_f32();
            size_t row = 0;
            for (const auto& p : parts) {
                INFO(p);
                Tensor t = set->read(p);
                CHECK(t.dtype == dt);
                const size_t rows = (size_t)t.shape[0], rb = dtype_nbytes(dt, C);
                CHECK(t.shape == Shape{(int64_t)rows, C});
                CHECK(std::memcmp(t.bytes.data(), whole.bytes.data() + row * rb, t.nbytes()) == 0);
                CHECK(t.to_f32() == std::vector<float>(all.begin() + row * C, all.begin() + (row + rows) * C));
                row += rows;
            }
            CHECK(row == (size_t)whole.shape[0]);
        }
        CHECK(set->find("single_transformer_blocks.0.proj_mlp.weight")->shape == Shape{4 * D, C});
        CHECK(check_views(*set) == 8);
    }
}

TEST_CASE("layouts: a GGUF whose architecture does not match its tensors", "[layouts][gguf][bad]") {
    TempDir dir("kiln_layouts");
    const std::string path = dir / "mislabelled.gguf";
    GgufWriter w;
    w.set_string("general.architecture", "sd3");
    w.add_tensor("img_in.weight", DType::f32, {4, 8}, [](void* d) { std::memset(d, 0, 128); });
    w.write(path);
    try {
        layouts::inspect(path);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("GGUF architecture 'sd3' but tensors of a flux transformer"));
    }
}
