// kiln-convert: diffusers folder -> one Kiln model file (GGUF v3).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "apps/component_flags.h"
#include "converter/convert.h"
#include "models/layouts/lora.h"
#include "runtime/core/error.h"
#include "runtime/core/file_io.h"
#include "runtime/core/settings.h"

namespace {
// Ctrl-C (or SIGTERM, SIGHUP) while writing: the partial OUT.tmp (gigabytes for a large model) is removed, OUT is
// left as it was. Only async-signal-safe calls.
char g_partial[4096];
void on_signal(int sig) {
    if (g_partial[0]) ::unlink(g_partial);
    const char msg[] = "\nkiln-convert: interrupted; nothing written (the partial output was removed)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
}
}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "Convert a diffusers model or pipeline folder into one Kiln model file (GGUF v3).\n\n"
        "SRC_DIR may be a pipeline folder (model_index.json with transformer/, vae/, scheduler/,\n"
        "text_encoder*/ and tokenizer*/), a component folder (config.json +\n"
        "diffusion_pytorch_model.safetensors, or sharded *.safetensors + its .index.json), or a\n"
        "scheduler folder (scheduler_config.json); text encoders (config.json + model.safetensors) and\n"
        "tokenizer folders too. Nothing is written unless everything checks out.\n\n"
        "Examples:\n"
        "  kiln-convert models/default/dit-digits -o dit-digits.kiln\n"
        "  kiln-convert ~/hf/PixArt-XL-2-512x512/transformer -o pixart.kiln --dtype bf16\n"
        "  kiln-convert ~/hf/sd3-medium -o sd3.kiln --variant fp16\n"
        "  kiln-convert models/default/dit-digits -o digits-q4.kiln --dtype q4_k --keep '*.proj_out*=f16'\n"
        "  kiln info dit-digits.kiln        # inspect the result\n\n"
        "Single files as their publishers ship them (configs and tokenizers bundled, so the output stands alone):\n"
        "  kiln-convert --diffusion-model flux1-dev-Q4_K_S.gguf --vae ae.safetensors --clip-l clip_l.safetensors \\\n"
        "      --t5xxl t5xxl_fp16.safetensors -o flux-dev-q4.kiln\n"
        "  kiln-convert sd3.5_medium.safetensors --clip-l clip_l.safetensors --clip-g clip_g.safetensors \\\n"
        "      --t5xxl t5xxl_fp16.safetensors -o sd35m.kiln --dtype q8_0\n",
        "kiln-convert"};
    // CLI11 reads "/x" as an option on Windows by default; Kiln's flags are the same everywhere, and "/path" stays a
    // path.
    app.allow_windows_style_options(false);
    std::string src, out, dtype = "f16", variant;
    std::vector<std::string> keep;
    bool quiet = false;
    kiln::converter::ComponentFiles parts;
    app.add_option("SRC", src,
                   "diffusers folder to convert, or a single file as published (Stability's SD3/SD3.5 file, a Flux "
                   "file: BFL, ComfyUI or city96 GGUF)");
    std::string model;
    app.add_option("--model", model, "the same as SRC (as kiln generate names it)");
    kiln::app::add_component_flags(app, parts);
    app.add_option("-o,--output", out, "output model file (written atomically: OUT.tmp, then renamed)")->required();
    app.add_option("--dtype", dtype,
                   "storage of weights with >= 2 dims: f32, f16 (default) or bf16, or ggml's block-quantized "
                   "q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, which apply to linear-layer matrices "
                   "whose rows are whole blocks (32 values; 256 for the k-quants, else q4_0/q5_0/q5_1/q8_0), all other "
                   "matrices (conv, embedding "
                   "tables) then "
                   "being f16; 1-D tensors (biases, norms) are always f32 and integer tensors are kept")
        ->check(CLI::IsMember(
            {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}));
    app.add_option("--keep", keep,
                   "per-tensor recipe PATTERN=DTYPE (repeatable; the last match wins): tensors whose stored name "
                   "(e.g. transformer.proj_out.weight) matches the glob PATTERN take DTYPE instead of --dtype, "
                   "e.g. --keep '*.proj_out.*=f16'");
    app.add_option("--variant", variant, "read *.VARIANT.safetensors weights, as diffusers' variant= (e.g. fp16)");
    std::vector<std::string> loras;
    bool lora_allow_unmatched = false;
    app.add_option("--lora", loras,
                   "bake a LoRA into the transformer and the CLIP text encoders it targets, FILE[:SCALE] (repeatable; "
                   "SCALE default 1): merged as trained, W + SCALE (alpha / rank) B A, into the f32/f16/bf16 weights "
                   "before --dtype applies (docs/lora.md)");
    app.add_flag("--lora-allow-unmatched", lora_allow_unmatched,
                 "LoRA keys that match no module are a warning instead of an error");
    app.add_flag("-q,--quiet", quiet, "print nothing but errors");
    app.set_version_flag("--version", std::string("kiln-convert ") + KILN_VERSION_STRING);
    CLI11_PARSE(app, argc, argv);
    try {
        kiln::converter::Options opt;
        opt.dtype = kiln::parse_dtype(dtype, "--dtype");
        opt.variant = variant;
        for (const std::string& k : keep) {
            const size_t eq = k.rfind('=');
            KILN_CHECK(eq != std::string::npos && eq > 0, "--keep '", k, "': expected PATTERN=DTYPE");
            const kiln::DType dt = kiln::parse_dtype(k.substr(eq + 1), "--keep " + k);
            KILN_CHECK(dt != kiln::DType::i32 && dt != kiln::DType::i64 && dt != kiln::DType::u8, "--keep '", k,
                       "': weights are stored as a float or quantized dtype");
            opt.keep.emplace_back(k.substr(0, eq), dt);
        }
        opt.quiet = quiet;
        for (const std::string& l : loras) opt.loras.push_back(kiln::layouts::parse_lora_arg(l));
        opt.lora_allow_unmatched = lora_allow_unmatched;
        // The environment, read at this edge (runtime/core/settings.h): the tests' pause after each tensor.
        opt.test_delay_ms = kiln::settings_from_env().test.convert_delay_ms;
        kiln::check_output_path(out, "-o");        // before any input is read
        const std::string partial = out + ".tmp";  // GgufWriter writes here, then renames
        if (partial.size() < sizeof g_partial) std::memcpy(g_partial, partial.c_str(), partial.size() + 1);
        for (int sig : {SIGINT, SIGTERM}) std::signal(sig, on_signal);
#ifdef SIGHUP  // POSIX only: Windows sends SIGINT (Ctrl+C) or SIGBREAK
        std::signal(SIGHUP, on_signal);
#endif
#ifdef SIGBREAK
        std::signal(SIGBREAK, on_signal);
#endif
        KILN_CHECK(src.empty() || model.empty(), "give SRC or --model, not both");
        if (src.empty()) src = model;
        std::error_code ec;
        const bool single = !src.empty() && std::filesystem::is_regular_file(src, ec);
        if (parts.any() || single) {
            KILN_CHECK(src.empty() || single, src, ": a folder converts alone; beside component files give a file");
            parts.model = src;
            parts.hf_home = kiln::settings_from_env().hf_home;
            kiln::converter::Assembly a = kiln::converter::assemble(parts);
            if (!quiet)
                for (const std::string& note : a.notes) std::fprintf(stderr, "kiln-convert: %s\n", note.c_str());
            if (const std::string missing = a.incomplete(); !missing.empty() && !quiet)
                std::fprintf(stderr, "kiln-convert: note: writing a partial pipeline: %s\n", missing.c_str());
            kiln::converter::convert_assembly(a, out, opt);
        } else {
            KILN_CHECK(!src.empty(), "nothing to convert: give SRC or component files (--diffusion-model, ...)");
            kiln::converter::convert_folder(src, out, opt);
        }
    } catch (const kiln::Error& e) {
        std::fprintf(stderr, "kiln-convert: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln-convert: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
