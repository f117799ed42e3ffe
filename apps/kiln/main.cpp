// kiln: diffusion transformers on any GPU through Vulkan compute.
#include <cstdio>
#include <filesystem>

#include "apps/kiln/commands.h"
#include "runtime/core/error.h"
#include "runtime/core/settings.h"

namespace kiln::app {
std::string default_model() {
    if (std::string m = settings_from_env().default_model; !m.empty()) return m;
    // Next to the binary's build tree first (converted at build time), else the source folder.
    for (const char* p : {KILN_DEFAULT_MODEL_FILE, KILN_DEFAULT_MODEL_DIR})
        if (std::filesystem::exists(p)) return p;
    return KILN_DEFAULT_MODEL_DIR;
}

Settings cli_settings(int device) {
    Settings s = settings_from_env();
    if (device >= 0) s.context.device = device;
    if (device_flags().f16_activations) s.exec.act_f16 = true;
    if (!device_flags().transfer_queue.empty()) s.context.transfer_queue = device_flags().transfer_queue;
    if (!device_flags().precision.empty()) s.exec.precision = device_flags().precision;
    return s;
}
}  // namespace kiln::app

int main(int argc, char** argv) {
    CLI::App app{
        "kiln: diffusion transformers (DiT, PixArt, SD3, Flux) on any GPU through Vulkan compute.\n"
        "Try: kiln generate --class-labels 0,1,2,3 --grid --upscale 4 -o digits.png\n"
        "     kiln generate --model sd3.kiln --prompt \"a photo of a cat\" -o cat.png"};
    // CLI11 reads "/x" as an option on Windows by default; Kiln's flags are the same everywhere, and "/path" stays a
    // path.
    app.allow_windows_style_options(false);
    app.set_version_flag("--version", std::string("kiln ") + kiln_version());
    app.require_subcommand(1);
    std::vector<std::pair<CLI::App*, kiln::app::Run>> cmds;
    auto add = [&](const char* name, const char* help, kiln::app::Run (*fn)(CLI::App&)) {
        CLI::App* sub = app.add_subcommand(name, help);
        cmds.push_back({sub, fn(*sub)});
    };
    add("generate",
        "Generate images: DiT from class labels (default: the built-in dit-digits model), PixArt, SD3 and Flux from "
        "prompts",
        kiln::app::add_generate);
    add("forward", "Run one component (transformer, vae or a text encoder) on named inputs from a safetensors file",
        kiln::app::add_forward);
    add("bench", "Benchmark a model or a synthetic architecture in eager/full/regional modes", kiln::app::add_bench);
    add("devices", "List Vulkan devices and the features Kiln uses", kiln::app::add_devices);
    add("info", "Describe a Kiln model file: components, config, parameters, dtypes, sizes", kiln::app::add_info);
    add("serve", "Serve one resident model over HTTP with OpenAI's images API (POST /v1/images/generations)",
        kiln::app::add_serve);
    add("tokenize", "Print the token ids a model's tokenizer gives a prompt (JSON)", kiln::app::add_tokenize);
    try {
        app.parse(argc, argv);
        for (auto& [sub, run] : cmds)
            if (sub->parsed()) run();
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const kiln::Error& e) {
        std::fprintf(stderr, "kiln: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
