#version 460
// pbr.frag with the sun's shadow map (the demo's effects on).
#extension GL_GOOGLE_include_directive : require
#ifdef TILE_MIN_LOD
#extension GL_ARB_sparse_texture_clamp : require
#endif
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_maps[3];

#define SHADOWS
// By tiles: lifted to the resident level (`g_tile_bias`, pbr_shading.glsl).
#ifdef TILE_MIN_LOD
#define SAMPLE_MAP(k, uv) textureClampARB(u_maps[k], uv, g_tile_min_lod)
#else
#define SAMPLE_MAP(k, uv) (u_frame.tiles.x != 0u ? texture(u_maps[k], uv, g_tile_bias) : texture(u_maps[k], uv))
#endif
#include "pbr_shading.glsl"
