#version 460
// pbr_bindless.frag with the sun's shadow map (the demo's effects on).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_nonuniform_qualifier : require
#ifdef TILE_MIN_LOD
#extension GL_ARB_sparse_texture_clamp : require
#endif
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_textures[];

#include "atlas_emulation_forward.glsl"

#define SHADOWS
// By tiles: lifted to the resident level (`g_tile_bias`, pbr_shading.glsl).
#ifdef TILE_MIN_LOD
#define SAMPLE_MAP(k, uv) textureClampARB(u_textures[pc.material.x * 3u + (k)], uv, g_tile_min_lod)
#else
#define SAMPLE_MAP(k, uv) (u_frame.stream.w != 0u ? sample_emulated(pc.material.x * 3u + (k), uv) : u_frame.tiles.x != 0u ? texture(u_textures[pc.material.x * 3u + (k)], uv, g_tile_bias) : texture(u_textures[pc.material.x * 3u + (k)], uv))
#endif
#include "pbr_shading.glsl"
