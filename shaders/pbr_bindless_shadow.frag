#version 460
// pbr_bindless.frag with the sun's shadow map (the demo's effects on).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_nonuniform_qualifier : require
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_textures[];

#define SHADOWS
#define SAMPLE_MAP(k, uv) texture(u_textures[pc.material.x * 3u + (k)], uv)
#include "pbr_shading.glsl"
