// The cooperative-matrix attention kernels' operand split (attention_flash_cm.glsl, attention_coopmat4.comp); the
// includer defines FAST (KILN_PRECISION=fast: hi alone, lo never read).
// x = hi + lo + e. hi: x rounded to 11 significant bits through its bits (no compiler can fold lo to 0), exact in f16
// for 2^-14 <= |x| < 65504; lo = f16(x - hi), x - hi exact in f32 and <= 2^-11 |x|. f16 rounding (RTE or RTZ) and
// subnormals: |e| <= 2^-21 |x| + 2^-23.
void split(float x, out float16_t hi, out float16_t lo) {
    const float h = uintBitsToFloat((floatBitsToUint(x) + 0x1000u) & 0xffffe000u);
    hi = float16_t(h);
    if (!FAST) lo = float16_t(x - h);  // FAST: the lo tiles are never read
}
