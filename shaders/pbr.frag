#version 460
// Metallic-roughness PBR: GGX distribution, Smith (height-correlated GGX)
// visibility, Schlick Fresnel; tangent-space normal maps; analytic lights plus
// a hemisphere ambient term scaled by the occlusion map.
#extension GL_GOOGLE_include_directive : require
#ifdef TILE_MIN_LOD
#extension GL_ARB_sparse_texture_clamp : require
#endif
#include "common.glsl"

// One material's maps: 0 albedo (sRGB), 1 normal (xy, z rebuilt), 2 occlusion-roughness-metallic.
layout(set = 1, binding = 0) uniform sampler2D u_maps[3];

// By tiles: lifted to the resident level (`g_tile_bias`, pbr_shading.glsl).
#ifdef TILE_MIN_LOD
#define SAMPLE_MAP(k, uv) textureClampARB(u_maps[k], uv, g_tile_min_lod)
#else
#define SAMPLE_MAP(k, uv) (u_frame.tiles.x != 0u ? texture(u_maps[k], uv, g_tile_bias) : texture(u_maps[k], uv))
#endif
#include "pbr_shading.glsl"
