// kiln-convert --dtype q8_0 .. q6_k (q2_k, q3_k, q5_k included) and --keep: linear matrices are stored in ggml's block
// types (bytes exactly kiln::quantize() of the source), everything else keeps the float policy; recipes are checked.
#include <catch2/catch.hpp>

#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {
converter::Options opts(DType dt, std::vector<std::pair<std::string, DType>> keep = {}) {
    converter::Options o;
    o.dtype = dt;
    o.keep = std::move(keep);
    o.quiet = true;
    return o;
}
const std::string kQ = "transformer.transformer_blocks.0.attn1.to_q.weight";                             // [32, 32]
const std::string kT1 = "transformer.transformer_blocks.1.norm1.emb.timestep_embedder.linear_1.weight";  // [32, 256]
}  // namespace

TEST_CASE("quantized conversion: linear matrices in each ggml type, the rest f16/f32", "[converter][quant]") {
    const DType dt = GENERATE(DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                              DType::q4_k, DType::q5_k, DType::q6_k);
    CAPTURE(dtype_name(dt));
    TempDir tmp;
    const std::string out = tmp / "q.kiln";
    converter::convert_folder(fixture("dit"), out, opts(dt));
    GgufFile g = GgufFile::open(out);
    SafeTensors st = SafeTensors::open(fixture("dit") + "/diffusion_pytorch_model.safetensors");
    // k-quants need 256-wide rows: the 32-wide ones fall back to q4_0 (q2_k, q3_k), q5_0 (q4_k), q5_1 (q5_k)
    // or q8_0 (q6_k).
    const DType narrow = dt == DType::q2_k || dt == DType::q3_k ? DType::q4_0
                         : dt == DType::q4_k                    ? DType::q5_0
                         : dt == DType::q5_k                    ? DType::q5_1
                         : dt == DType::q6_k                    ? DType::q8_0
                                                                : dt;
    CHECK(g.at(kQ).dtype == narrow);
    CHECK(g.at(kT1).dtype == dt);
    CHECK(g.at("transformer.pos_embed.proj.weight").dtype == DType::f16);  // conv
    CHECK(g.at("transformer.transformer_blocks.0.norm1.emb.class_embedder.embedding_table.weight").dtype ==
          DType::f16);                                               // embedding table
    CHECK(g.at("transformer.proj_out_1.bias").dtype == DType::f32);  // 1-D
    size_t quantized = 0;
    for (auto& src : st.tensors()) {
        const GgufTensor& t = g.at("transformer." + src.name);
        INFO(t.name);
        Tensor a = st.read(src.name), b = g.read(t.name);
        CHECK(b.bytes == a.astype(t.dtype).bytes);  // exactly the quantizer's (or float rounding's) bytes
        if (!dtype_is_quant(t.dtype)) continue;
        quantized++;
        CHECK((t.shape.size() == 2 && t.shape[1] % dtype_block(t.dtype) == 0));
        // Relative L2 of U(-a, a)-like weights: step / sqrt(12) over a / sqrt(3) = 1 / (2 levels): q8_0 1/254,
        // 4-bit 1/16..1/30, 5-bit 1/32..1/62, q6_k 1/64; bounds at 2x. q3_k: 1/8, q2_k: 1/3 at most (ranges per
        // 16 values are narrower than the tensor's: test_quant measures 0.14 and 0.31 on U(-1, 1)).
        const double lim = t.dtype == DType::q2_k                               ? 0.45
                           : t.dtype == DType::q3_k                             ? 0.25
                           : t.dtype == DType::q8_0                             ? 0.008
                           : (t.dtype == DType::q4_0 || t.dtype == DType::q4_1) ? 0.13
                           : t.dtype == DType::q4_k                             ? 0.08
                           : t.dtype == DType::q6_k                             ? 0.035
                                                                                : 0.065;
        CHECK(rel_l2(b.to_f32(), a.to_f32()) <= lim);
    }
    CHECK(quantized == 20);  // every linear matrix of the DiT fixture
}

TEST_CASE("--keep recipes pick per-tensor dtypes; blocks stay alike", "[converter][quant]") {
    TempDir tmp;
    const std::string out = tmp / "k.kiln";
    converter::convert_folder(fixture("dit"), out,
                              opts(DType::q4_0, {{"*.attn1.*", DType::f16}, {"*.proj_out_2.weight", DType::q8_0}}));
    {  // closed before `out` is written again: wine (and Windows before 10 1709) cannot replace an open file
        GgufFile g = GgufFile::open(out);
        CHECK(g.at(kQ).dtype == DType::f16);
        CHECK(g.at("transformer.transformer_blocks.1.attn1.to_out.0.weight").dtype == DType::f16);
        CHECK(g.at("transformer.transformer_blocks.1.ff.net.2.weight").dtype == DType::q4_0);
        CHECK(g.at("transformer.proj_out_2.weight").dtype == DType::q8_0);
        CHECK(g.at("transformer.proj_out_2.bias").dtype == DType::f32);  // recipes apply to matrices only
    }
    // f16 model with one quantized layer; a quantized recipe on a conv weight falls back to f16.
    converter::convert_folder(
        fixture("dit"), out, opts(DType::f16, {{"*.ff.net.0.proj.weight", DType::q4_k}, {"*pos_embed*", DType::q8_0}}));
    GgufFile h = GgufFile::open(out);
    CHECK(h.at("transformer.transformer_blocks.0.ff.net.0.proj.weight").dtype == DType::q5_0);  // 32-wide rows
    CHECK(h.at("transformer.pos_embed.proj.weight").dtype == DType::f16);
    CHECK(h.at(kQ).dtype == DType::f16);
    // Matching one block only would break the shared block layout.
    CHECK_THROWS_WITH(converter::convert_folder(fixture("dit"), tmp / "bad.kiln",
                                                opts(DType::q8_0, {{"*blocks.1.attn1.to_q.weight", DType::f16}})),
                      Catch::Contains("blocks of one kind are stored alike") && Catch::Contains("attn1.to_q.weight"));
    CHECK_FALSE(fs::exists(tmp / "bad.kiln"));
}

// fp8 checkpoints (safetensors F8_E4M3 / F8_E5M2): the converter reads them like any float source and stores
// what --dtype asks; f16 holds every fp8 value exactly. Every block's to_q is e4m3, to_k e5m2 (blocks of one
// kind must be alike); the bytes are random with the top exponent bit clear: |x| < 2, no NaN or inf.
TEST_CASE("fp8 safetensors sources convert exactly to f16, or quantize", "[converter][quant][fp8]") {
    TempDir tmp;
    const std::string dir = tmp / "dit8";
    fs::copy(fixture("dit"), dir, fs::copy_options::recursive);
    const std::string file = dir + "/diffusion_pytorch_model.safetensors";
    std::vector<std::pair<std::string, Tensor>> ts;
    std::map<std::string, std::string> meta;
    size_t n8 = 0;
    {
        SafeTensors st = SafeTensors::open(file);
        meta = st.metadata();
        uint32_t h = 12345;
        for (auto& i : st.tensors()) {
            Tensor t = st.read(i.name);
            const bool q = i.name.size() > 16 && i.name.rfind("attn1.to_q.weight") == i.name.size() - 17;
            const bool k = i.name.size() > 16 && i.name.rfind("attn1.to_k.weight") == i.name.size() - 17;
            if (q || k) {
                Tensor f(q ? DType::f8_e4m3 : DType::f8_e5m2, t.shape);
                for (auto& b : f.bytes) h = h * 1664525u + 1013904223u, b = (uint8_t)(h >> 24) & 0xbf;
                t = std::move(f);
                n8++;
            }
            ts.emplace_back(i.name, std::move(t));
        }
    }
    REQUIRE(n8 >= 4);
    write_safetensors(file, ts, meta);
    SafeTensors st = SafeTensors::open(file);
    CHECK(st.at("transformer_blocks.0.attn1.to_q.weight").dtype == DType::f8_e4m3);
    CHECK(st.at("transformer_blocks.0.attn1.to_k.weight").dtype == DType::f8_e5m2);
    for (DType dt : {DType::f16, DType::q8_0}) {
        CAPTURE(dtype_name(dt));
        const std::string out = tmp / "f8.kiln";
        converter::convert_folder(dir, out, opts(dt));
        GgufFile g = GgufFile::open(out);
        for (auto& [name, t] : ts) {
            if (t.dtype != DType::f8_e4m3 && t.dtype != DType::f8_e5m2) continue;
            CAPTURE(name);
            CHECK(st.read(name).bytes == t.bytes);
            const GgufTensor& o = g.at("transformer." + name);
            CHECK(o.dtype == dt);  // [32, 32] linear matrices: whole q8_0 blocks
            const Tensor b = g.read(o.name);
            if (o.dtype == DType::f16) {  // exact: the fp8 values themselves
                const std::vector<float> want = t.to_f32(), got = b.to_f32();
                CHECK(got == want);
            } else {
                CHECK(b.bytes == t.astype(o.dtype).bytes);
            }
        }
    }
}
