#version 460
// The tone map as a compute pass (headless output with visibility shading: a
// full-screen fragment pass costs the H200's few graphics units); see tonemap.glsl.
#extension GL_GOOGLE_include_directive : require
#define TONEMAP_COMPUTE
#include "tonemap.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
// The sRGB output image through a UNORM view: the encoding is done here.
layout(set = 1, binding = 0, rgba8) uniform writeonly image2D u_out;

vec3 srgb_encode(vec3 c) {
    return mix(c * 12.92, 1.055 * pow(c, vec3(1.0 / 2.4)) - 0.055, step(vec3(0.0031308), c));
}

void main() {
    ivec2 size = imageSize(u_out);
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (p.x >= size.x || p.y >= size.y) {
        return;
    }
    vec2 frag = vec2(p) + 0.5;
    imageStore(u_out, p, vec4(srgb_encode(tonemap_at(frag / vec2(size), frag)), 1.0));
}
