#version 460
// The visibility buffer's geometry pass: positions only, transformed exactly as
// pbr_shade.glsl transforms them again to rebuild each pixel's surface.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(location = 0) in vec3 a_position;

void main() {
    gl_Position = u_frame.view_proj * (pc.model * vec4(a_position, 1.0));
}
