#version 450
#extension GL_GOOGLE_include_directive : require
// loop_advance: the step counter of the device loop, after every reader of this step: step += 1.
layout(local_size_x = 1) in;
layout(binding = 0) buffer State { uint step; };

void main() { step += 1; }
