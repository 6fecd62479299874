#version 460
// The visibility buffer's sky: every pixel no draw covered (id 0).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sky.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 2, binding = 0, r32ui) uniform readonly uimage2D u_vis;
layout(set = 2, binding = 1, rgba16f) uniform writeonly image2D u_hdr;

void main() {
    ivec2 size = imageSize(u_hdr);
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (p.x >= size.x || p.y >= size.y || (imageLoad(u_vis, p).x >> 24) != 0u) {
        return;
    }
    vec2 ndc = (vec2(p) + 0.5) / vec2(size) * 2.0 - 1.0;
    imageStore(u_hdr, p, vec4(sky_color(ndc), 1.0));
}
