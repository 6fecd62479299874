#version 460
// The visibility buffer's shading with bindless materials and the sun's shadow map: the draw's
// maps at 3 x its material index in one array (dynamically uniform: the
// material is the dispatch's).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_nonuniform_qualifier : require
#ifdef TILE_MIN_LOD
#extension GL_ARB_sparse_texture_clamp : require
#endif
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_textures[];

#define SHADOWS
// u_frame.tiles.w != 0: the page atlas (--residency atlas); u_frame.stream.w != 0:
// the atlas-filtering emulation (pbr_shade.glsl).
#define ATLAS_EMULATION
#define SAMPLE_MAP(k, uv) (u_frame.tiles.w != 0u ? sample_atlas(pc.material.x * 3u + (k), uv) : u_frame.stream.w != 0u ? sample_emulated(pc.material.x * 3u + (k), uv) : SAMPLE_GRAD(u_textures[pc.material.x * 3u + (k)], uv))
#include "pbr_shade.glsl"
