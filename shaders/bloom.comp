#version 460
// Bloom as a compute pass (visibility shading: a fragment pass costs the H200's few
// graphics units); see bloom.glsl.
#extension GL_GOOGLE_include_directive : require
#include "bloom.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 1, binding = 0, rgba16f) uniform writeonly image2D u_out;

void main() {
    ivec2 size = imageSize(u_out);
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (p.x >= size.x || p.y >= size.y) {
        return;
    }
    imageStore(u_out, p, vec4(bloom_at((vec2(p) + 0.5) / vec2(size)), 1.0));
}
