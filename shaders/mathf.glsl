// Portable f32 math whose accuracy does not depend on the driver's exp/sin/cos/erf, which the
// Vulkan spec lets be loose (exp: 3 + 2|x| ulp; sin/cos: 2^-11 absolute on [-pi, pi], unbounded
// outside). Polynomials after Cephes (expf, sinf, cosf); erf after Abramowitz-Stegun 7.1.26.
#ifndef KILN_MATHF_GLSL
#define KILN_MATHF_GLSL

// exp(x), correctly rounded in nearly all cases (<= ~0.6 ulp): x = n ln2 + r by Cody-Waite (ln2 = C1 - C2,
// C1 with 9 significant bits so n*C1 and x - n*C1 are exact), r carried as a float pair, and
// e^r = 1 + r + r^2 P(r) summed in double-float so only the final addition rounds. P: Taylor to r^8
// (|r| <= ln2/2: truncation < 1e-10).
float exp_accurate(float x) {
    x = clamp(x, -87.3, 88.7);
    float n = floor(x * 1.44269504088896341 + 0.5);
    precise float rh = x - n * 0.693359375;
    precise float u = n * 2.12194440e-4;
    precise float r = rh + u;  // two-sum: r + re == rh + u exactly
    precise float ub = r - rh;
    precise float re = (rh - (r - ub)) + (u - ub);
    float tail = r * r *
                 (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0 +
                                                                                             r * (1.0 / 40320.0)))))));
    precise float h = 1.0 + r;  // two-sum of 1 and r (|r| < 1: fast two-sum)
    precise float he = r - (h - 1.0);
    precise float e = h + (he + re + tail);
    return ldexp(e, int(n));
}

// sin and cos of x: Cody-Waite reduction by pi/2 with a 3-part constant (the first two parts have few
// significant bits, so q * part is exact for |q| < 2^13, i.e. |x| < ~12000), then the polynomials on
// |r| <= pi/4 and the quadrant's signs. ~1 ulp on that range.
vec2 sincos_accurate(float x) {
    float q = floor(x * 0.636619772367581343 + 0.5);
    precise float r = x - q * 1.5703125;
    r = r - q * 4.837512969970703125e-4;
    r = r - q * 7.54978995489188216e-8;
    float z = r * r;
    float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    int k = int(q) & 3;
    vec2 sc = (k == 0) ? vec2(s, c) : (k == 1) ? vec2(c, -s) : (k == 2) ? vec2(-s, -c) : vec2(-c, s);
    return sc;
}

// erf(x) with |error| <= 1.5e-7 (Abramowitz-Stegun 7.1.26).
float erf_as(float x) {
    float a = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
                        t * exp_accurate(-a * a);
    return x < 0.0 ? -y : y;
}

// a / b correctly rounded in nearly all cases, without relying on the driver's division (2.5 ulp)
// or on fma being fused: q0 = a / b, then q0 * b = p + e exactly (Dekker's product with Veltkamp
// splits), and the residual a - q0 b = (a - p) - e corrects q0.
void split_f32(float a, out float hi, out float lo) {
    precise float c = 4097.0 * a;
    precise float h = c - (c - a);
    hi = h;
    lo = a - h;
}
float div_accurate(float a, float b) {
    precise float q0 = a / b;
    precise float p = q0 * b;
    float qh, ql, bh, bl;
    split_f32(q0, qh, ql);
    split_f32(b, bh, bl);
    precise float e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl;
    precise float res = (a - p) - e;
    precise float q = q0 + res / b;
    return q;
}
// tanh(x) from e = exp(-2|x|) (exp_accurate, ~1 ulp): (1 - e) / (1 + e) with the sign of x, so nothing overflows
// for any finite x; a few ulp from the correctly rounded value (tanh.comp, attention's soft-capping).
float tanh_accurate(float x) {
    float e = exp_accurate(-2.0 * abs(x));
    float t = (1.0 - e) / (1.0 + e);
    return x < 0.0 ? -t : t;
}

#endif
