#version 460
// Bloom as a fragment pass (forward shading); see bloom.glsl.
#extension GL_GOOGLE_include_directive : require
#include "bloom.glsl"

layout(location = 0) in vec2 v_uv;
layout(location = 0) out vec4 o_color;

void main() {
    o_color = vec4(bloom_at(v_uv), 1.0);
}
