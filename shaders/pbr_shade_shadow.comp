#version 460
// The visibility buffer's shading with a descriptor set per material and the sun's shadow map.
#extension GL_GOOGLE_include_directive : require
#ifdef TILE_MIN_LOD
#extension GL_ARB_sparse_texture_clamp : require
#endif
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_maps[3];

#define SHADOWS
#define SAMPLE_MAP(k, uv) SAMPLE_GRAD(u_maps[k], uv)
#include "pbr_shade.glsl"
