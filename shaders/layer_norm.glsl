// Two-pass mean and 1 / sqrt(variance + eps) of row [base, base + cols) of x (declared by the includer),
// one workgroup of 64 per row: shared by layer_norm.comp and norm_modulate.comp, so both normalise alike.
vec2 layer_norm_stats(uint base, uint cols, float eps) {
    uint t = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint c = t; c < cols; c += 64) s += x[base + c];
    float mean = wg_sum(s) / float(cols);
    float v = 0.0;
    for (uint c = t; c < cols; c += 64) {
        float d = x[base + c] - mean;
        v += d * d;
    }
    return vec2(mean, inversesqrt(wg_sum(v) / float(cols) + eps));
}
