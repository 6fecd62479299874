#version 460
// The visibility buffer: which draw (1-based, the top 8 bits; 0, the clear value,
// is the sky) and which of its triangles (the low 24 bits) covers each pixel, in
// 4 bytes (`frame::targets::VIS_FORMAT`). Shading happens later, in compute
// (pbr_shade.glsl), once per pixel.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(early_fragment_tests) in;
layout(location = 0) out uint o_id;

void main() {
    o_id = (pc.material.w << 24) | (uint(gl_PrimitiveID) & 0xffffffu);
}
