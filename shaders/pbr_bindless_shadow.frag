#version 460
// pbr_bindless.frag with the sun's shadow map (the demo's effects on).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_nonuniform_qualifier : require
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_textures[];

#define SHADOWS
// By tiles: lifted to the resident level (`g_tile_bias`, pbr_shading.glsl).
#define SAMPLE_MAP(k, uv) (u_frame.tiles.x != 0u ? texture(u_textures[pc.material.x * 3u + (k)], uv, g_tile_bias) : texture(u_textures[pc.material.x * 3u + (k)], uv))
#include "pbr_shading.glsl"
