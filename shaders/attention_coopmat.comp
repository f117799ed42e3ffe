// requires: GL_KHR_cooperative_matrix
#version 450
#extension GL_GOOGLE_include_directive : require
// attention, flash kernel with its inner products (S = Q K^T, O += P V) on cooperative matrices at the device's
// f16 x f16 + f32 shape, f32 or f16 q/k/v, head_dim <= 256 (attention_flash.glsl, attention_flash_cm.glsl).
#define FLASH_COOPMAT
#include "attention_flash.glsl"
