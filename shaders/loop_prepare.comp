// variants: f32 f64 i64
#version 450
#extension GL_GOOGLE_include_directive : require
// loop_prepare: the transformer's inputs of step i = state.step (host loop: scale_model_input, set_input):
//   hidden[r*n + k] = x[k] / divisor (r < batch / rows: the guidance copies), timestep[r] = table[i].timestep.
#include "loop.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer Steps { LoopStep steps[]; };
layout(binding = 1) readonly buffer State { uint step; };
layout(binding = 2) buffer X { float x[]; };
layout(binding = 3) writeonly buffer Hidden { float hidden[]; };
layout(binding = 4) writeonly buffer Timestep { float timestep[]; };

void main() {
    uint i = flat_id();
    LoopStep st = steps[step];
    if (i < p.batch) timestep[i] = st.timestep;
    if (i >= p.n) return;
    float s = x[i];
    if (st.divisor != 1.0) s = div_rn(s, st.divisor);  // the host skips the division by 1 (same value)
    if (p.scale_in_place != 0) x[i] = s;
    for (uint r = 0; r < p.batch / p.rows; ++r) hidden[r * p.n + i] = s;
}
