#version 450
#extension GL_GOOGLE_include_directive : require
// loop_step: classifier-free guidance and the scheduler update of step i = state.step (host: the guidance
// loop of the pipeline, then sched::apply_step), in the host's operation order (`precise`: no contraction).
// out: [batch, row_out] transformer output; learned sigma reads the first row_lat of each row.
// hist: 3 ring slots of n floats; step i writes x0 to slot i%3 and reads steps i-1, i-2 from (i+2)%3, (i+1)%3.
// noise: n floats per step (read only where prev_noise != 0: DDIM with eta > 0).
#include "loop.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer Steps { LoopStep steps[]; };
layout(binding = 1) readonly buffer State { uint step; };
layout(binding = 2) readonly buffer Out { float outv[]; };
layout(binding = 3) buffer X { float x[]; };
layout(binding = 4) buffer Hist { float hist[]; };
layout(binding = 5) readonly buffer Noise { float noise[]; };

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    const uint si = step;
    LoopStep st = steps[si];
    uint b = i / p.row_lat, k = i % p.row_lat;
    precise float m = outv[b * p.row_out + k];
    if (p.cfg != 0) {  // uncond + g * (cond - uncond); DiT's prompt rows come first, the pipelines' negatives
        float first = m, second = outv[(b + p.rows) * p.row_out + k];
        float cond = p.cond_first != 0 ? first : second, unc = p.cond_first != 0 ? second : first;
        m = unc + p.guidance * (cond - unc);
    }
    const float s = x[i];
    precise float x0 = 0.0;
    if (st.want_x0 != 0) {
        x0 = st.x0_sample * s + st.x0_model * m;
        if (st.x0_clip > 0.0) x0 = x0 < -st.x0_clip ? -st.x0_clip : (st.x0_clip < x0 ? st.x0_clip : x0);  // std::clamp
    }
    precise float prev = st.prev_sample * s + st.prev_model * m + st.prev_x0 * x0;
    if (st.history_used > 0) prev += st.prev_h0 * hist[((si + 2) % 3) * p.n + i];
    if (st.history_used > 1) prev += st.prev_h1 * hist[((si + 1) % 3) * p.n + i];
    if (st.prev_noise != 0.0) prev += st.prev_noise * noise[si * p.n + i];
    x[i] = prev;
    if (st.keep_x0 != 0) hist[(si % 3) * p.n + i] = x0;
}
