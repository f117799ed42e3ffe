// kiln devices, kiln info, kiln forward.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "apps/kiln/commands.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/core/safetensors.h"
#include "runtime/exec/attention_table.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"

namespace kiln::app {

Run add_devices(CLI::App& app) {
    return [] {
        int n = 0;
        capi_check(kiln_device_count(&n));
        if (n == 0) {  // the reason, in one line: no Vulkan loader, or no device
            kiln_device_info d = KILN_DEVICE_INFO_INIT;
            capi_check(kiln_device_get_info(0, &d));
        }
        KILN_CHECK(n > 0, "no Vulkan devices (", platform::vulkan_driver_advice(), ")");
        for (int i = 0; i < n; ++i) {
            kiln_device_info d = KILN_DEVICE_INFO_INIT;
            capi_check(kiln_device_get_info(i, &d));
            std::printf("[%d] %s (%s)\n", d.index, d.name, d.type);
            std::printf("    driver: %s, Vulkan %s\n", d.driver, d.api_version);
            std::printf("    memory: %.1f GiB device-local%s\n", (double)d.device_local_bytes / (1 << 30),
                        d.unified_memory ? " (unified: host-visible)" : "");
            std::printf("    fp16 storage: %s, fp16 arithmetic: %s, int8: %s, int64: %s\n",
                        d.fp16_storage ? "yes" : "no", d.fp16_arithmetic ? "yes" : "no",
                        d.int8_arithmetic ? "yes" : "no", d.int64 ? "yes" : "no");
            const std::string control = d.subgroup_size_control
                                            ? " (size control: " + std::to_string(d.subgroup_size_min) + ".." +
                                                  std::to_string(d.subgroup_size_max) + ")"
                                            : " (no size control)";
            std::printf(
                "    subgroup size: %u%s, cooperative matrix: %s, buffer device address: %s, timestamps: %s, "
                "memory budget: %s\n",
                d.subgroup_size, control.c_str(), d.cooperative_matrix ? "yes" : "no",
                d.buffer_device_address ? "yes" : "no", d.timestamps ? "yes" : "no", d.memory_budget ? "yes" : "no");
            std::printf("    transfer-only queue: %s, storage buffers per stage: %u\n", d.transfer_queue ? "yes" : "no",
                        d.max_storage_buffers_per_stage);
            std::printf(
                "    maxStorageBufferRange: %llu MiB, maxMemoryAllocationSize: %llu MiB, shared memory: %u KiB\n",
                (unsigned long long)(d.max_storage_buffer_range >> 20),
                (unsigned long long)(d.max_allocation_bytes >> 20), d.max_shared_memory_bytes >> 10);
            if (d.texel_buffers)
                std::printf("    texel buffers: yes, up to %u texels per view (%.1f GiB of RGBA16F)\n",
                            d.max_texel_buffer_elements, (double)d.max_texel_buffer_elements * 8 / (1 << 30));
            else
                std::printf(
                    "    texel buffers: no (RGBA32F/RGBA16F/RGBA16_UINT/R32F/R16F/R16_UINT uniform texel "
                    "buffers missing; storage-buffer kernels only)\n");
            if (!d.fp16_storage) std::printf("    NOT USABLE: lacks storageBuffer16BitAccess\n");
            if (!d.subgroup_arithmetic) std::printf("    NOT USABLE: lacks subgroup arithmetic in compute\n");
            if (d.fp16_storage && d.subgroup_arithmetic) {  // which linear kernels this device runs (no measuring)
                std::string table, attention;
                try {  // no pipeline cache: listing devices neither reads nor rewrites it
                    Settings settings = cli_settings(d.index);
                    settings.context.validation = false;
                    settings.context.skip_pipeline_cache_file = true;
                    vk::Context ctx(settings);
                    table = exec::describe_linear_table(ctx);
                    attention = exec::describe_attention_table(ctx);
                } catch (const Error& e) {
                    table = attention = std::string("not read (the device did not open: ") + e.what() + ")";
                }
                std::printf("    linear kernels: %s\n", table.c_str());
                std::printf("    attention kernels: %s\n", attention.c_str());
            }
        }
        std::printf("Kiln picks discrete > integrated > virtual > CPU; override with --device N or KILN_DEVICE=N.\n");
    };
}

Run add_info(CLI::App& app) {
    auto file = std::make_shared<std::string>();
    app.add_option("file", *file,
                   "Kiln model file (.kiln, from kiln-convert), or a single file as published (flux1-dev.safetensors, "
                   "a city96 GGUF, sd3.5_large.safetensors, ae.safetensors, ...); default: the built-in dit-digits "
                   "model");
    return [file] {
        if (file->empty()) *file = default_model();
        std::error_code ec;
        KILN_CHECK(!std::filesystem::is_directory(*file, ec), *file,
                   " is a folder: kiln info describes a Kiln file (convert the folder with `kiln-convert ", *file,
                   " -o NAME.kiln`)");
        size_t n = 0;
        capi_check(kiln_describe_model_file(file->c_str(), nullptr, 0, &n));
        std::string text(n + 1, '\0');
        capi_check(kiln_describe_model_file(file->c_str(), text.data(), text.size(), &n));
        text.resize(n);
        std::cout << text;
    };
}

Run add_forward(CLI::App& app) {
    struct Opts {
        std::string model, component, inputs, output, mode = "regional", vram_budget;
        int device = -1, tile_size = 0;
        bool cpu = false, tiled = false, sliced = false;
        ComponentFlags parts;
    };
    auto o = std::make_shared<Opts>();
    app.add_option("--model", o->model,
                   "Kiln model file, a diffusers pipeline/component folder, or a single file as published");
    add_component_flags(app, o->parts);
    app.add_option("--component", o->component,
                   "transformer, vae, text_encoder, ... (default: the transformer, or the only model component)");
    app.add_option("--inputs", o->inputs,
                   "safetensors with inputs named as diffusers' forward arguments: hidden_states, timestep, "
                   "class_labels (DiT); + encoder_hidden_states, encoder_attention_mask (PixArt); "
                   "+ pooled_projections (SD3); + img_ids, txt_ids, guidance (Flux); x_0.., cap_feats_0.., t (Z-Image: "
                   "lists, one tensor per item); latents (VAE decode) or "
                   "image (VAE encode); input_ids, attention_mask (text encoders)")
        ->required();
    app.add_option("--output", o->output,
                   "safetensors to write: sample (transformer; Z-Image: sample_0..); decoded, or latent_mean and "
                   "latent_logvar (VAE); last_hidden_state, penultimate_hidden_state, pooler_output or "
                   "text_embeds (CLIP); last_hidden_state (T5)")
        ->required();
    app.add_option("--mode", o->mode, "eager | full | regional")->capture_default_str();
    app.add_option("--device", o->device, "Vulkan device index (see `kiln devices`)");
    app.add_option("--vram-budget", o->vram_budget, kVramBudgetHelp);
    add_f16_activations_flag(app);
    add_transfer_queue_option(app);
    add_precision_option(app);
    app.add_flag("--cpu", o->cpu, "Run the CPU reference executor instead of Vulkan (slow; the oracle)");
    app.add_flag("--tiled", o->tiled,
                 "VAE: tiled decode/encode as diffusers' enable_tiling() (overlapping tiles, blended), for inputs "
                 "larger than one tile");
    app.add_option("--tile-size", o->tile_size,
                   "VAE with --tiled: tile side in pixels (diffusers' tile_sample_min_size; default: the config's "
                   "sample_size)");
    app.add_flag("--sliced", o->sliced, "VAE: one batch element at a time, as diffusers' enable_slicing()");
    app.footer(
        "Examples:\n  kiln forward --model dit.kiln --inputs in.safetensors --output out.safetensors\n"
        "  kiln forward --diffusion-model flux1-dev-Q8_0.gguf --vae ae.safetensors --clip-l clip_l.safetensors "
        "--t5xxl t5xxl_fp16.safetensors --component transformer --inputs in.safetensors --output out.safetensors");
    return [o] {
        check_output_path(o->output, "--output");
        KILN_CHECK(o->tile_size == 0 || o->tiled, "--tile-size needs --tiled");
        const exec::Mode mode = exec::parse_mode(o->mode);
        ContextPtr ctx = open_context(o->device, o->vram_budget.empty() ? 0 : exec::parse_bytes(o->vram_budget));
        const ModelSpec spec{o->model, o->parts};
        KILN_CHECK(!spec.model.empty() || spec.assembled(),
                   "--model or a component file (--diffusion-model, ...) "
                   "is required");
        ModelPtr model = open_model(ctx.get(), spec);
        auto st = SafeTensors::open(o->inputs);
        std::vector<Tensor> in;  // the data the kiln_tensor views point into
        std::vector<kiln_tensor> views;
        for (auto& t : st.tensors()) in.push_back(st.read(t.name));
        for (size_t i = 0; i < in.size(); ++i)
            views.push_back({st.tensors()[i].name.c_str(), c_dtype(in[i].dtype), (int)in[i].shape.size(),
                             in[i].shape.data(), in[i].bytes.data()});
        kiln_forward_params p = KILN_FORWARD_PARAMS_INIT;
        if (!o->component.empty()) p.component = o->component.c_str();
        p.inputs = views.data();
        p.input_count = (int)views.size();
        p.jit_mode = mode == exec::Mode::eager  ? KILN_JIT_EAGER
                     : mode == exec::Mode::full ? KILN_JIT_FULL
                                                : KILN_JIT_REGIONAL;
        p.cpu_reference = o->cpu;
        p.vae_tiled = o->tiled;
        p.vae_tile_size = o->tile_size;
        p.vae_sliced = o->sliced;
        kiln_result* r = nullptr;
        capi_check(kiln_forward(model.get(), &p, &r));
        ResultPtr result(r);
        std::vector<std::pair<std::string, Tensor>> list;  // sorted by name, as kiln_forward returns them
        for (int i = 0; i < kiln_result_count(r); ++i) {
            kiln_tensor t;
            capi_check(kiln_result_get(r, i, &t));
            list.push_back({t.name, tensor_of(t)});
        }
        write_safetensors(o->output, list);
        for (auto& [name, t] : list) std::fprintf(stderr, "wrote %s %s\n", name.c_str(), shape_str(t.shape).c_str());
    };
}

}  // namespace kiln::app
