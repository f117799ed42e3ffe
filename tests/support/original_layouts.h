#pragma once
// Single files in the layouts people download for Z-Image and FLUX.2 [klein], written from the diffusers fixture
// folders (tests/data/fixtures/z_image_pipeline, flux2_klein_pipeline): the inverse of diffusers' conversions, written
// here from the original projects' module names (not from models/layouts' tables, which the tests check against
// them). Every tensor's bytes are the folder's, re-arranged (fused qkv rows concatenated, [scale; shift] halves
// swapped to [shift; scale], linears as 1x1 convs), so loading a file must give the folder's tensors bitwise.
#include <string>

#include "runtime/core/dtype.h"

namespace kiln::test {

// Z-Image's original keys (Tongyi-MAI / ComfyUI: x_embedder, final_layer, layers.N.attention.qkv / out / q_norm,
// norm_final.weight, 1-D pad tokens), each key under `prefix` ("" or "model.diffusion_model.").
void write_z_image_original(const std::string& path, const std::string& prefix = "");
// FLUX.2's BFL keys (img_in, double_blocks.N.img_attn.qkv, single_blocks.N.linear1, final_layer [shift; scale], ...).
void write_flux2_bfl(const std::string& path, const std::string& prefix = "");
// A fixture's VAE in the LDM layout: c = "z_image", FLUX.1's (BFL's ae.safetensors); c = "flux2_klein", FLUX.2's
// (flux2-vae.safetensors: the same encoder / decoder, encoder.quant_conv, decoder.post_quant_conv, bn.*), without
// bn.num_batches_tracked when `tracked` is false.
void write_vae_ldm(const std::string& c, const std::string& path, bool tracked = true);
// A fixture's Qwen3 text encoder (c = "z_image" or "flux2_klein") in transformers' names: under "model." when
// `model_prefix`, bare otherwise, with an lm_head.weight when `lm_head`.
void write_qwen3_transformers(const std::string& c, const std::string& path, bool model_prefix, bool lm_head);
// The same in llama.cpp's names (GGUF, general.architecture qwen3), matrices stored as `matrix` (f32, f16, q8_0,
// ...; norms stay f32 as llama.cpp keeps them), with an output.weight LM head.
void write_qwen3_gguf(const std::string& c, const std::string& path, DType matrix);

}  // namespace kiln::test
