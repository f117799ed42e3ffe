#version 450
#extension GL_GOOGLE_include_directive : require
// attention, flash kernel: q tiles against shared-memory K/V tiles with an online softmax, head_dim <= 512, f32 or
// f16 q/k/v (see attention_flash.glsl); the inner products are scalar (every device, lavapipe included).
#include "attention_flash.glsl"
