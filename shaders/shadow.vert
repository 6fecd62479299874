#version 460
// The sun's shadow map: depth only, the gallery's meshes seen from light 0.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(location = 0) in vec3 a_position;

void main() {
    gl_Position = u_frame.light_view_proj * (pc.model * vec4(a_position, 1.0));
}
