// GGUF v3 reader/writer: every metadata type round-trips; hand-built defective files are rejected
// before anything is used, with a message naming the problem.
#include <catch2/catch.hpp>

#include "runtime/core/quant.h"
#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Minimal hand GGUF builder for defects the writer refuses to produce.
struct Raw {
    std::string b;
    template <class T>
    Raw& put(T v) {
        b.append(reinterpret_cast<const char*>(&v), sizeof(T));
        return *this;
    }
    Raw& str(const std::string& s) {
        put<uint64_t>(s.size());
        b += s;
        return *this;
    }
    Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        b += "GGUF";
        return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
    }
    Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put<uint32_t>(v); }
    // One tensor info (dims given innermost first, as in the file).
    Raw& info(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t off) {
        str(name).put<uint32_t>((uint32_t)dims.size());
        for (auto d : dims) put<uint64_t>(d);
        return put<uint32_t>(type).put<uint64_t>(off);
    }
    Raw& pad(size_t a) {
        while (b.size() % a) b += '\0';
        return *this;
    }
    Raw& zeros(size_t n) {
        b.append(n, '\0');
        return *this;
    }
};

std::string open_error(const std::string& path) {
    try {
        GgufFile::open(path);
    } catch (const kiln::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("GGUF metadata of every type round-trips", "[gguf]") {
    TempDir tmp;
    GgufWriter w;
    w.set_string("s", "héllo\nworld");
    w.set_u32("u32", 4000000000u);
    w.set_i64("i64", -(1ll << 40));
    w.set_f32("f32", 0.25f);
    w.set_bool("yes", true);
    w.set_string_array("sa", {"a", "", "ccc"});
    w.set_i64_array("ia", {1, -2, 3});
    w.set_i64_array("empty", {});
    for (auto [k, t] : {std::pair{"u8", GgufType::u8},
                        {"i8", GgufType::i8},
                        {"u16", GgufType::u16},
                        {"i16", GgufType::i16},
                        {"i32", GgufType::i32},
                        {"u64", GgufType::u64}}) {
        GgufValue v;
        v.type = t;
        v.u = 7;
        v.i = -7;
        w.set_value(k, v);
    }
    GgufValue f64;
    f64.type = GgufType::f64;
    f64.f = 1e300;
    w.set_value("f64", f64);
    GgufValue nested;  // array of arrays of u16
    nested.type = GgufType::array;
    nested.elem = GgufType::array;
    for (int i = 0; i < 2; ++i) {
        GgufValue inner;
        inner.type = GgufType::array;
        inner.elem = GgufType::u16;
        for (int k = 0; k <= i; ++k) {
            GgufValue e;
            e.type = GgufType::u16;
            e.u = (uint64_t)(10 * i + k);
            inner.arr.push_back(e);
        }
        nested.arr.push_back(inner);
    }
    w.set_value("nested", nested);
    w.set_string("s", "replaced");  // keeps its position
    Tensor t = random_tensor({3, 5}, 1);
    w.add_tensor("t", DType::f32, t.shape, [&](void* p) { std::memcpy(p, t.bytes.data(), t.nbytes()); });
    w.add_tensor("scalar", DType::i64, {}, [](void* p) { *(int64_t*)p = 42; });
    w.add_tensor("empty", DType::f16, {0, 4}, nullptr);
    w.write(tmp / "m.gguf");

    GgufFile g = GgufFile::open(tmp / "m.gguf");
    CHECK(g.keys()[0] == "general.alignment");
    CHECK(g.keys()[1] == "s");
    CHECK(g.get_string("s") == "replaced");
    CHECK(g.get_int("u32") == 4000000000ll);
    CHECK(g.get_int("i64") == -(1ll << 40));
    CHECK(g.get_float("f32") == 0.25);
    CHECK(g.get_float("f64") == 1e300);
    CHECK(g.get_bool("yes"));
    CHECK(g.get_string_array("sa") == std::vector<std::string>{"a", "", "ccc"});
    CHECK(g.get_int_array("ia") == std::vector<int64_t>{1, -2, 3});
    CHECK(g.get_int_array("empty").empty());
    CHECK(g.get_int("u8") == 7);
    CHECK(g.get_int("i8") == -7);
    CHECK(g.get_int("u64") == 7);
    CHECK(g.value("nested").arr.at(1).arr.at(1).u == 11);
    CHECK_THROWS_WITH(g.get_int("s"), Catch::Contains("'s'") && Catch::Contains("not an integer"));
    CHECK_THROWS_WITH(g.get_string("nope"), Catch::Contains("missing metadata key 'nope'"));
    CHECK_THROWS_WITH(g.get_string_array("ia"), Catch::Contains("not a string array"));
    CHECK_THROWS_WITH(g.get_bool("u8"), Catch::Contains("not bool"));
    CHECK(g.read("t").bytes == t.bytes);
    CHECK(g.read("t").shape == Shape{3, 5});
    CHECK(g.read("scalar").data<int64_t>()[0] == 42);
    CHECK(g.at("empty").nbytes == 0);
    CHECK_THROWS_WITH(g.at("x"), Catch::Contains("missing tensor 'x' in"));
    for (auto& ti : g.tensors()) CHECK((ti.offset - g.data_offset()) % 4096 == 0);
}

// The k-quants city96's files carry besides Q4_K / Q6_K: ggml ids 10 (Q2_K, 84 bytes per 256 values),
// 11 (Q3_K, 110) and 13 (Q5_K, 176). Written by Kiln's writer and by hand with the raw ids, both read back.
TEST_CASE("GGUF holding Q2_K, Q3_K and Q5_K tensors reads back", "[gguf][quant]") {
    TempDir tmp;
    const std::pair<DType, uint32_t> types[] = {{DType::q2_k, 10}, {DType::q3_k, 11}, {DType::q5_k, 13}};
    GgufWriter w;
    std::map<std::string, Tensor> src;
    for (auto [t, id] : types) {
        CHECK(ggml_type_of(t) == id);
        const std::string n = std::string("w.") + dtype_name(t);
        src[n] = random_tensor({3, 512}, id).astype(t);
        const Tensor& q = src[n];
        w.add_tensor(n, t, q.shape, [&q](void* p) { std::memcpy(p, q.bytes.data(), q.nbytes()); });
    }
    w.write(tmp / "k.gguf");
    GgufFile g = GgufFile::open(tmp / "k.gguf");
    for (auto [t, id] : types) {
        const std::string n = std::string("w.") + dtype_name(t);
        CAPTURE(n);
        CHECK(g.at(n).dtype == t);
        CHECK(g.at(n).nbytes == 3 * 2 * dtype_block_bytes(t));
        const Tensor r = g.read(n);
        CHECK(r.shape == Shape{3, 512});
        CHECK(r.bytes == src[n].bytes);
        CHECK(rel_l2(r.to_f32(), random_tensor({3, 512}, id).to_f32()) < 0.4);  // q2_k: ~0.3 (test_quant)
    }
    for (auto [t, id] : types) {
        CAPTURE(id);
        const size_t bb = dtype_block_bytes(t);
        Raw r;
        r.header(1, 1).kv_u32("general.alignment", 32).info("x", {256, 2}, id, 0).pad(32);
        std::vector<uint8_t> blocks(2 * bb);
        std::vector<float> x(512);
        for (size_t i = 0; i < 512; ++i) x[i] = (float)((int)(i % 7) - 3) * 0.25f;
        quantize(x.data(), t, blocks.data(), 512);
        r.b.append((const char*)blocks.data(), blocks.size());
        spit(tmp / "raw.gguf", r.b);
        GgufFile f = GgufFile::open(tmp / "raw.gguf");
        CHECK(f.at("x").dtype == t);
        const Tensor back = f.read("x");
        CHECK(std::memcmp(back.bytes.data(), blocks.data(), blocks.size()) == 0);
    }
}

TEST_CASE("GGUF writer refuses what GGUF cannot hold", "[gguf]") {
    GgufWriter w;
    w.add_tensor("a", DType::f32, {1}, nullptr);
    CHECK_THROWS_WITH(w.add_tensor("a", DType::f32, {1}, nullptr), Catch::Contains("added twice"));
    CHECK_THROWS_WITH(w.add_tensor("u", DType::u8, {1}, nullptr), Catch::Contains("no GGUF tensor type"));
}

TEST_CASE("defective GGUF files are rejected at open", "[gguf][malformed]") {
    TempDir tmp;
    // A valid file to corrupt: the converted DiT.
    converter::Options o;
    o.quiet = true;
    const std::string good = tmp / "good.kiln";
    converter::convert_folder(fixture("dit"), good, o);
    const std::string bytes = slurp(good);
    GgufFile g = GgufFile::open(good);
    const GgufTensor last = g.tensors().back();

    struct Case {
        const char* name;
        const char* expect;
        std::string data;
    };
    std::vector<Case> cases;
    auto edit = [&](size_t at, const std::string& with) {
        std::string s = bytes;
        s.replace(at, with.size(), with);
        return s;
    };
    cases.push_back({"bad magic", "bad magic", edit(0, "GGUX")});
    cases.push_back({"bad version", "unsupported GGUF version 2", edit(4, std::string("\x02\0\0\0", 4))});
    cases.push_back({"truncated tensor data", "runs past the end of the data section",
                     bytes.substr(0, last.offset + last.nbytes - 1)});
    cases.push_back({"truncated header", "truncated", bytes.substr(0, 200)});
    cases.push_back({"too short", "truncated", bytes.substr(0, 10)});
    {
        // The first KV is general.alignment (key length 17 at offset 24, key, then its type at 49).
        REQUIRE(bytes.substr(32, 17) == "general.alignment");
        cases.push_back({"bad metadata type", "bad value type 13", edit(49, std::string("\x0d\0\0\0", 4))});
        cases.push_back(
            {"key length past EOF", "runs past the end", edit(24, std::string("\xff\xff\xff\x0f\0\0\0\0", 8))});
        cases.push_back({"alignment of the wrong type", "must be u32", edit(49, std::string("\x05\0\0\0", 4))});
        cases.push_back(
            {"alignment not a power of two", "not a power of two", edit(53, std::string("\x01\x10\0\0", 4))});
    }
    cases.push_back({"impossible tensor count", "tensor count", edit(8, std::string("\0\0\0\0\0\0\0\x01", 8))});
    cases.push_back({"impossible kv count", "metadata count", edit(16, std::string("\0\0\0\0\0\0\0\x01", 8))});

    auto raw = [](const std::function<void(Raw&)>& f) {
        Raw r;
        f(r);
        return r.b;
    };
    cases.push_back(
        {"unsupported ggml type", "tensor 'q' has GGUF type 9 (Q8_1), which Kiln does not read (supported: F32",
         raw([](Raw& r) { r.header(1, 1).kv_u32("general.alignment", 32).info("q", {32}, 9, 0).pad(32).zeros(64); })});
    // city96's tools can write the i-quants: IQ2_XXS is ggml type 16 (66 bytes per 256 values).
    cases.push_back({"i-quant", "tensor 'blk.w' has GGUF type 16 (IQ2_XXS), which Kiln does not read", raw([](Raw& r) {
                         r.header(1, 1).kv_u32("general.alignment", 32).info("blk.w", {256}, 16, 0).pad(32).zeros(66);
                     })});
    cases.push_back({"ternary quant", "GGUF type 35 (TQ2_0)", raw([](Raw& r) {
                         r.header(1, 1).kv_u32("general.alignment", 32).info("q", {256}, 35, 0).pad(32).zeros(66);
                     })});
    cases.push_back({"unknown ggml type id", "GGUF type 99 (unknown)", raw([](Raw& r) {
                         r.header(1, 1).kv_u32("general.alignment", 32).info("q", {32}, 99, 0).pad(32).zeros(64);
                     })});
    // Quantized: rows must be whole blocks (Q4_0: 32 values, 18 bytes; Q4_K: 256 values, 144 bytes).
    cases.push_back(
        {"quantized row not whole blocks", "of type Q4_0 has row length 48, not a multiple of its 32", raw([](Raw& r) {
             r.header(1, 1).kv_u32("general.alignment", 32).info("q", {48, 2}, 2, 0).pad(32).zeros(128);
         })});
    cases.push_back({"k-quant row not whole blocks", "of type Q4_K has row length 128", raw([](Raw& r) {
                         r.header(1, 1).kv_u32("general.alignment", 32).info("q", {128, 2}, 12, 0).pad(32).zeros(512);
                     })});
    cases.push_back({"truncated quantized tensor", "runs past the end of the data section", raw([](Raw& r) {
                         // Q8_0 [4, 64]: 8 blocks of 34 bytes = 272; one byte short
                         r.header(1, 1).kv_u32("general.alignment", 32).info("q", {64, 4}, 8, 0).pad(32).zeros(271);
                     })});
    cases.push_back({"quantized tensors overlap", "overlap", raw([](Raw& r) {
                         // Q6_K [1, 256] is 210 bytes: a tensor at offset 192 overlaps it
                         r.header(2, 1).kv_u32("general.alignment", 32).info("a", {256}, 14, 0).info("b", {4}, 0, 192);
                         r.pad(32).zeros(512);
                     })});
    cases.push_back({"misaligned offset", "not a multiple of the alignment", raw([](Raw& r) {
                         r.header(1, 1).kv_u32("general.alignment", 32).info("a", {4}, 0, 16).pad(32).zeros(64);
                     })});
    cases.push_back({"overlapping tensors", "overlap", raw([](Raw& r) {
                         r.header(2, 1).kv_u32("general.alignment", 32).info("a", {16}, 0, 0).info("b", {8}, 0, 32);
                         r.pad(32).zeros(128);
                     })});
    cases.push_back({"duplicate tensor names", "appears twice",
                     raw([](Raw& r) { r.header(2, 0).info("a", {4}, 0, 0).info("a", {4}, 0, 32).pad(32).zeros(64); })});
    cases.push_back(
        {"duplicate keys", "appears twice", raw([](Raw& r) { r.header(0, 2).kv_u32("k", 1).kv_u32("k", 2); })});
    cases.push_back({"dims overflow", "shape overflows", raw([](Raw& r) {
                         r.header(1, 0).info("a", {1ull << 40, 1ull << 40}, 0, 0).pad(32).zeros(64);
                     })});
    cases.push_back({"too many dims", "dims (at most 8)", raw([](Raw& r) {
                         r.header(1, 0).info("a", std::vector<uint64_t>(9, 1), 0, 0).pad(32).zeros(64);
                     })});
    cases.push_back({"bool not 0/1", "bool value 2",
                     raw([](Raw& r) { r.header(0, 1).str("b").put<uint32_t>(7).put<uint8_t>(2).zeros(16); })});
    cases.push_back({"huge array", "runs past the end of the file", raw([](Raw& r) {
                         r.header(0, 1).str("a").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(1ull << 60).zeros(16);
                     })});
    cases.push_back({"bad array element type", "bad array element type 42", raw([](Raw& r) {
                         r.header(0, 1).str("a").put<uint32_t>(9).put<uint32_t>(42).put<uint64_t>(1).zeros(16);
                     })});

    for (auto& c : cases) {
        DYNAMIC_SECTION(c.name) {
            const std::string p = tmp / "bad.gguf";
            spit(p, c.data);
            std::string msg = open_error(p);
            INFO("message: " << msg);
            CHECK_THAT(msg, Catch::Contains(c.expect));
            CHECK_THAT(msg, Catch::Contains("bad.gguf"));
        }
    }
}
