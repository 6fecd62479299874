#version 460
// The PBR pass with bindless materials: every texture in one array (descriptor
// indexing), the draw's material index in the push constants.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_nonuniform_qualifier : require
#include "common.glsl"

layout(set = 1, binding = 0) uniform sampler2D u_textures[];

#define SAMPLE_MAP(k, uv) texture(u_textures[pc.material.x * 3u + (k)], uv)
#include "pbr_shading.glsl"
