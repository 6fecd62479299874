// u_frame.stream.w != 0: the atlas-filtering emulation (textures::ATLAS_EMULATION_ENV),
// here with the sampler's own level of detail (textureQueryLod): texture `t`'s
// floor and ceiling levels, each sampled alone through its single-level view
// (elements from u_frame.stream.w & 0x3fffffff, 14 a texture) with the
// fragment's gradients, blended by the level's fraction.
vec4 sample_emulated(uint t, vec2 uv) {
    // At most the 14 views a texture has (a map above 8K has more levels).
    int levels = min(textureQueryLevels(u_textures[t]), 14);
    float lambda = clamp(textureQueryLod(u_textures[t], uv).x, 0.0, float(levels - 1));
    float l0 = floor(lambda);
    uint first = (u_frame.stream.w & 0x3fffffffu) + t * 14u;
    uint i0 = uint(l0);
    uint i1 = min(i0 + 1u, uint(levels - 1));
    vec2 dx = dFdx(uv);
    vec2 dy = dFdy(uv);
    vec4 a = textureGrad(u_textures[nonuniformEXT(first + i0)], uv, dx, dy);
    vec4 b = textureGrad(u_textures[nonuniformEXT(first + i1)], uv, dx, dy);
    return mix(a, b, lambda - l0);
}
