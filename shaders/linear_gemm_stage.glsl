// The tiled GEMM's staging (linear_gemm.glsl, included inside its main()): macros that load slice t of x and W
// from their buffers into registers with the slice maxima (LOAD_SLICE), and store the registers into a shared
// slice buffer, x scaled and split into hi + lo (or rounded, or as stored) and W as its dtype asks (STORE_SLICE).
// They read main()'s tid, kt0, m0, n0, w0, kq and the registers xv, wv.

// Loads slice t into registers and adds its max |x| to smax[t % 3] (and its max |W| to smaxw[t % 3]).
#define LOAD_SLICE(t)                                                                                          \
    {                                                                                                          \
        float mx = 0.0;                                                                                        \
        [[unroll]] for (uint r = 0; r < LX; ++r) {                                                             \
            const uint l = tid + NT * r, k4 = QR * (kt0 + (t)) + l % QR;                                       \
            xv[r] = k4 < kq ? x_load4(min(m0 + l / QR, p.M - 1u) * kq + k4) : vec4(0.0);                       \
            const vec4 a = abs(xv[r]);                                                                         \
            mx = max(mx, max(max(a[0], a[1]), max(a[2], a[3])));                                             \
        }                                                                                                      \
        if (XSCALE) {                                                                                          \
            mx = subgroupMax(mx);                                                                              \
            if (subgroupElect()) atomicMax(smax[(t) % 3u], floatBitsToUint(mx));                              \
        }                                                                                                      \
        LOAD_W(t)                                                                                              \
    }
#ifdef W_SCALED
#define LOAD_W(t)                                                                                              \
    {                                                                                                          \
        float mw = 0.0;                                                                                        \
        [[unroll]] for (uint r = 0; r < LW; ++r) {                                                             \
            const uint l = tid + NT * r, k4 = QR * (kt0 + (t)) + l % QR;                                       \
            wv[r] = k4 < kq ? WLOAD(w0 + min(n0 + l / QR, p.N - 1u) * kq + k4) : vec4(0.0);                   \
            const vec4 a = abs(wv[r]);                                                                         \
            mw = max(mw, max(max(a[0], a[1]), max(a[2], a[3])));                                             \
        }                                                                                                      \
        mw = subgroupMax(mw);                                                                                  \
        if (subgroupElect()) atomicMax(smaxw[(t) % 3u], floatBitsToUint(mw));                                 \
    }
#else
#define LOAD_W(t)                                                                                              \
    [[unroll]] for (uint r = 0; r < LW; ++r) {                                                                 \
        const uint l = tid + NT * r, k4 = QR * (kt0 + (t)) + l % QR;                                           \
        wv[r] = k4 < kq ? WLOAD16(w0 + min(n0 + l / QR, p.N - 1u) * kq + k4) : f16vec4(0.0);                  \
    }
#endif
// Stores the registers as slice buffer b: x scaled by sc and split into hi + lo; W as stored, or scaled by scw
// (and split, W_SPLIT).
#define STORE_SLICE(b, sc, scw)                                                                                \
    {                                                                                                          \
        [[unroll]] for (uint r = 0; r < LX; ++r) {                                                             \
            const uint l = tid + NT * r, o = (b) * BM * LDS + (l / QR) * LDS + 4u * (l % QR);                  \
            if (XSPLIT)                                                                                        \
                [[unroll]] for (uint c = 0; c < 4u; ++c) split16(xv[r][c] * (sc), xh[o + c], xl[o + c]);       \
            else if (XSCALE)                                                                                   \
                [[unroll]] for (uint c = 0; c < 4u; ++c) xh[o + c] = hi16(xv[r][c] * (sc));                    \
            else                                                                                               \
                [[unroll]] for (uint c = 0; c < 4u; ++c) xh[o + c] = float16_t(xv[r][c]);                      \
        }                                                                                                      \
        [[unroll]] for (uint r = 0; r < LW; ++r) {                                                             \
            const uint l = tid + NT * r, o = (b) * BN * LDS + (l / QR) * LDS + 4u * (l % QR);                  \
            [[unroll]] for (uint c = 0; c < 4u; ++c) STORE_W(o + c, wv[r][c], scw)                             \
        }                                                                                                      \
    }
#if defined(W_SPLIT)
#define STORE_W(i, v, scw)                                       \
    if (FAST == 0u) split16((v) * (scw), ws[i], wl[i]);          \
    else ws[i] = hi16((v) * (scw));
#elif defined(W_SCALED)
#define STORE_W(i, v, scw) ws[i] = float16_t((v) * (scw));
#else
#define STORE_W(i, v, scw) ws[i] = (v);
#endif
#ifdef W_SCALED
#define W_SCALE(t) slice_scale(smaxw[(t) % 3u])
#else
#define W_SCALE(t) 1.0
#endif
