#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(location = 0) in vec3 a_position;
layout(location = 1) in vec3 a_normal;
layout(location = 2) in vec4 a_tangent;
layout(location = 3) in vec2 a_uv;

layout(location = 0) out vec3 v_world;
layout(location = 1) out vec3 v_normal;
layout(location = 2) out vec4 v_tangent;
layout(location = 3) out vec2 v_uv;

void main() {
    vec4 world = pc.model * vec4(a_position, 1.0);
    mat3 nmat = mat3(pc.model); // uniform scale only
    v_world = world.xyz;
    v_normal = nmat * a_normal;
    v_tangent = vec4(nmat * a_tangent.xyz, a_tangent.w);
    v_uv = a_uv * pc.uv_scale.xy;
    gl_Position = u_frame.view_proj * world;
}
