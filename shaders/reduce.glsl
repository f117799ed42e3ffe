// Workgroup reductions for the row ops: subgroup reduce, one partial per subgroup in shared memory,
// every invocation sums the partials. Two barriers per reduction; the result is uniform.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
shared float red_partials[256];  // one per subgroup, any subgroup size

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red_partials[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; ++i) s += red_partials[i];
    barrier();  // partials are reused by the next reduction
    return s;
}

float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red_partials[gl_SubgroupID] = v;
    barrier();
    float s = red_partials[0];
    for (uint i = 1; i < gl_NumSubgroups; ++i) s = max(s, red_partials[i]);
    barrier();
    return s;
}

// One workgroup per row; rows past 65535 spill into y (see groups_1d with local size 1).
uint wg_row() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
