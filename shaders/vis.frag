#version 460
// The visibility buffer: which draw (1-based; 0, the clear value, is the sky) and
// which of its triangles covers each pixel. Shading happens later, in compute
// (pbr_shade.glsl), once per pixel.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(early_fragment_tests) in;
layout(location = 0) out uvec2 o_id;

void main() {
    o_id = uvec2(pc.material.w, uint(gl_PrimitiveID));
}
