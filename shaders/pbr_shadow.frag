#version 460
// pbr.frag with the sun's shadow map (the demo's effects on).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_maps[3];

#define SHADOWS
#define SAMPLE_MAP(k, uv) texture(u_maps[k], uv)
#include "pbr_shading.glsl"
