// The per-slice scaling and hi / lo split of the tiled GEMM (linear_gemm.glsl; its header states the bound they
// give): a power of two per K slice that brings the slice's max |v| into [2^13, 2^14), and v = hi + lo in two f16s.

// 2^s with |x 2^s| < 2^14 for the slice's max m (1 for 0 and non-finite: the latter propagate as in f32).
// At most 2^100, so that 2^-s stays a normal f32 (slices with max < 2^-86 keep values below f16's normal range).
float slice_scale(uint mbits) {
    const float m = uintBitsToFloat(mbits);
    if (m == 0.0 || isinf(m) || isnan(m)) return 1.0;
    int e;
    frexp(m, e);  // m = f 2^e, f in [0.5, 1)
    return ldexp(1.0, min(14 - e, 100));
}

// v = hi + lo. hi: v rounded to 11 significant bits through its bits (round half away from zero), so no compiler
// can fold f32(f16(v)) back to v and zero lo; exact in f16 wherever |v| >= 2^-14 (the slice scale puts the slice's
// max in [2^13, 2^14)). lo = f16(v - hi): v - hi is exact in f32 and <= 2^-12 |v|, rounded to f16 (2^-11 relative of
// it): |v - hi - lo| <= 2^-23 |v| for normal lo, 2^-25 absolute below. 0 where hi overflowed (v infinite).
void split16(float v, out float16_t hi, out float16_t lo) {
    const float h = uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xffffe000u);
    hi = float16_t(h);
    lo = isinf(h) ? float16_t(0.0) : float16_t(v - h);
}
// split16's hi alone (FAST): v rounded to 11 significant bits, |v - hi| <= 2^-11 |v| (2^-25 absolute below 2^-14).
float16_t hi16(float v) { return float16_t(uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xffffe000u)); }
