#version 460
// The sky, drawn after the scene at the far plane (reversed Z: depth 0) with a
// greater-or-equal depth test, so only pixels nothing else covered are shaded;
// the colour target is therefore never cleared.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sky.glsl"

layout(location = 0) in vec2 v_uv;
layout(location = 0) out vec4 o_color;

void main() {
    o_color = vec4(sky_color(v_uv * 2.0 - 1.0), 1.0);
}
