// variants: f32 f16 bf16
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// conv2d NCHW, direct: y[b, o, i, j] = bias[o] + sum_{c, ky, kx} x[b, c, i*sh - ph + ky, j*sw - pw + kx]
// * w[o, c, ky, kx] (zero padding). Register tile: each invocation owns TO output channels x TC
// consecutive output columns of one output row; the TO channels are per workgroup (group y), so the
// weight reads are the same across the workgroup. Invocations on x enumerate (b, row, column block).
// Fast path (stride_w 1, kw <= 3, the VAE's 3x3 and 1x1 convs): per (c, ky) the TC + 2 input values of
// the row window are loaded once and reused by every kx: (TC + 2) + 3 TO loads for 3 TO TC FMAs.
#include "conv2d.glsl"
