// The visibility buffer's shading, one dispatch per draw over the draw's screen
// rectangle (push constants: the draw's, with `mesh`): each invocation takes the
// pixel when the visibility buffer names this draw, rebuilds the surface there
// from the triangle's three vertices, and shades it with pbr_shading.glsl. The
// includer declares the material's textures and SAMPLE_MAP(k, uv) as
// SAMPLE_GRAD(map k, uv): the gradients g_uv_dx / g_uv_dy (compute shaders have
// no implicit derivatives).
//
// Barycentrics come from homogeneous coordinates: a point of the triangle with
// weights b has clip-space (x, y, w) = M b, M's columns being the vertices' (x, y,
// w); it projects to the pixel's normalized coordinates q when M b is parallel to
// (q, 1), so b = M^-1 (q, 1) scaled to sum to one. This is perspective-correct and
// needs no clipping (vertices behind the eye included). The texture-coordinate
// gradients are differences within the pixel's 2x2 quad, as the forward pass's
// fragment shader gets them: the exact derivatives at the pixel's centre sample a
// little finer than the forward pass does (on lavapipe, 53-64 dB against the
// forward frames where quad differences give 57-70 dB), and with levels missing
// that shows.

layout(local_size_x = 8, local_size_y = 8) in;

layout(set = 2, binding = 0, r32ui) uniform readonly uimage2D u_vis;
layout(set = 2, binding = 1, rgba16f) uniform writeonly image2D u_hdr;
layout(set = 2, binding = 2, std430) readonly buffer Vertices {
    float data[];
} u_vertices;
layout(set = 2, binding = 3, std430) readonly buffer Indices {
    uint data[];
} u_indices;

// The texture-coordinate gradients SAMPLE_MAP samples with.
vec2 g_uv_dx;
vec2 g_uv_dy;

#ifdef ATLAS_EMULATION
// The sampler's own level of detail at a map of `size` texels (level 0), read
// from the level probe at element `probe` (textures::PROBE_SIZE: 128 texels,
// 8 levels, each holding its index) with the pixel's gradients scaled to the
// map, and 128 times smaller again from level 7 on.
float probe_lod(uint probe, float size) {
    float s = size / 128.0;
    float a = textureGrad(u_textures[nonuniformEXT(probe)], vec2(0.5), g_uv_dx * s, g_uv_dy * s).x;
    if (a < 6.99) {
        return a;
    }
    s /= 128.0;
    return 7.0 + textureGrad(u_textures[nonuniformEXT(probe)], vec2(0.5), g_uv_dx * s, g_uv_dy * s).x;
}

// A diagnostic (textures::ATLAS_EMULATION_ENV): texture `t` sampled as a page
// atlas would sample it. The level of detail from the gradients by the
// specification's anisotropic rule (the larger axis over the anisotropy the
// sampler allows, u_frame.stream.x), or (bit 30 of u_frame.stream.w) the
// sampler's own, read from the level probe; then two samples, of its floor and
// ceiling levels, each through a view of that single level (the bindless
// array's elements from u_frame.stream.w's low 30 bits, 14 a texture; the
// probe after them) with the same gradients, so the hardware filters within
// the level alone; blended by the fraction.
float emulated_lod(uint t, uint first_view) {
    vec2 size = vec2(textureSize(u_textures[t], 0));
    if ((u_frame.stream.w & 0x40000000u) != 0u) {
        return probe_lod(first_view * 15u, size.x);
    }
    float px = length(g_uv_dx * size);
    float py = length(g_uv_dy * size);
    float pmax = max(px, py);
    float pmin = max(min(px, py), 1e-20);
    float n = min(ceil(pmax / pmin), float(max(u_frame.stream.x, 1u)));
    return log2(max(pmax / n, 1e-20));
}

vec4 sample_emulated(uint t, vec2 uv) {
    // At most the 14 views a texture has (a map above 8K has more levels).
    int levels = min(textureQueryLevels(u_textures[t]), 14);
    uint views = u_frame.stream.w & 0x3fffffffu;
    float lambda = clamp(emulated_lod(t, views), 0.0, float(levels - 1));
    float l0 = floor(lambda);
    uint first = views + t * 14u;
    // The high bit: the coarser level's sample with gradients twice as long
    // (a minification there, so anisotropic like the finer one's).
    float coarse = (u_frame.stream.w >> 31) != 0u ? 2.0 : 1.0;
    uint i0 = uint(l0);
    uint i1 = min(i0 + 1u, uint(levels - 1));
    vec4 a = textureGrad(u_textures[nonuniformEXT(first + i0)], uv, g_uv_dx, g_uv_dy);
    vec4 b = textureGrad(u_textures[nonuniformEXT(first + i1)], uv, g_uv_dx * coarse, g_uv_dy * coarse);
    return mix(a, b, lambda - l0);
}

// --residency atlas (u_frame.tiles.w != 0): map `t` from its page atlas;
// defined after pbr_shading.glsl, whose u_residency holds the page table.
vec4 sample_atlas(uint t, vec2 uv);
// The level sample_atlas read last (--show-mips).
uint g_atlas_level;
#endif

// Samples `map` at `uv` with the pixel's gradients (and, with TILE_MIN_LOD,
// no finer than the resident level).
#ifdef TILE_MIN_LOD
#define SAMPLE_GRAD(map, uv) textureGradClampARB(map, uv, g_uv_dx, g_uv_dy, g_tile_min_lod)
#else
#define SAMPLE_GRAD(map, uv) textureGrad(map, uv, g_uv_dx, g_uv_dy)
#endif

#define SHADE_COMPUTE
#include "pbr_shading.glsl"

#ifdef ATLAS_EMULATION
// The page atlas (streaming::tiles::atlas). u_residency's words: [0] the level
// probe's element, [1] the maps' count, then 4 a map (atlas::MapEntry::words:
// its first entry's word; size | first tail level << 24; tile | border << 16;
// its atlas's element | slots per row << 16), then per map, per streamed
// level, per tile row and column, the tile's slot + 1 (0: not resident).

// The word of level `l`'s tile under `f` (fract of the coordinate) in the page
// table, for a map whose entries start at `base`; the tile's column and row.
uint atlas_entry(uint base, uint size, uint tile, uint l, vec2 f, out uvec2 txy) {
    uint start = 0u;
    for (uint i = 0u; i < l; i++) {
        uint g = (max(size >> i, 1u) + tile - 1u) / tile;
        start += g * g;
    }
    uint side = max(size >> l, 1u);
    uint g = (side + tile - 1u) / tile;
    uvec2 p = min(uvec2(f * float(side)), uvec2(side - 1u));
    txy = p / tile;
    return u_residency.words[base + start + txy.y * g + txy.x];
}

// A sample of level texels `side` a side, tile `txy`, from its slot: the
// pixel's gradients scaled from the level to the atlas, so the hardware
// filters within the slot (border included) as within the level.
vec4 atlas_read(uint atlas, uint per_row, uint tile, uint border, uint slot, uint side,
                uvec2 txy, vec2 f) {
    vec2 local = f * float(side) - vec2(txy * tile);
    uint span = tile + 2u * border;
    vec2 at = vec2(uvec2(slot % per_row, slot / per_row) * span + uvec2(border)) + local;
    vec2 asize = vec2(textureSize(u_textures[nonuniformEXT(atlas)], 0));
    vec2 k = float(side) / asize;
    return textureGrad(u_textures[nonuniformEXT(atlas)], at / asize, g_uv_dx * k, g_uv_dy * k);
}

// The sampler's level of detail from the probe; from its floor level, the
// finest resident one; that level and the next coarser one, blended by the
// fraction (only the resident level where it is coarser than the floor: a
// minimum level of detail). Levels from the map's first tail level on are the
// texture's own image (element t), sampled as it is: its level 0 is that level.
vec4 sample_atlas(uint t, vec2 uv) {
    uint h = 2u + t * 4u;
    uint base = u_residency.words[h];
    uint w1 = u_residency.words[h + 1u];
    uint w2 = u_residency.words[h + 2u];
    uint w3 = u_residency.words[h + 3u];
    uint size = w1 & 0xffffffu;
    uint tail = w1 >> 24u;
    uint tile = w2 & 0xffffu;
    uint border = w2 >> 16u;
    uint atlas = w3 & 0xffffu;
    uint per_row = max(w3 >> 16u, 1u);
    vec2 f = fract(uv);
    float lambda = max(probe_lod(u_residency.words[0], float(size)), 0.0);
    uint floor_level = uint(min(lambda, float(tail)));
    uint l = floor_level;
    uvec2 txy = uvec2(0u);
    uint e = 0u;
    for (; l < tail; l++) {
        e = atlas_entry(base, size, tile, l, f, txy);
        if (e != 0u) {
            break;
        }
    }
    g_atlas_level = l;
    if (l >= tail) {
        return textureGrad(u_textures[t], uv, g_uv_dx, g_uv_dy);
    }
    vec4 a = atlas_read(atlas, per_row, tile, border, e - 1u, max(size >> l, 1u), txy, f);
    float frac = lambda - float(floor_level);
    if (l > floor_level || frac <= 0.0) {
        return a;
    }
    vec4 b;
    if (l + 1u >= tail) {
        b = textureGrad(u_textures[t], uv, g_uv_dx, g_uv_dy);
    } else {
        uvec2 t1;
        uint e1 = atlas_entry(base, size, tile, l + 1u, f, t1);
        if (e1 == 0u) {
            return a;
        }
        b = atlas_read(atlas, per_row, tile, border, e1 - 1u, max(size >> (l + 1u), 1u), t1, f);
    }
    return mix(a, b, frac);
}
#endif

// `scene::mesh::Vertex`: position 3, normal 3, tangent 4, uv 2 (floats).
const uint VERTEX_FLOATS = 12u;

struct Corner {
    vec3 pos;
    vec3 normal;
    vec4 tangent;
    vec2 uv;
};

// Perspective-correct barycentrics of the point at `ndc` on the triangle's plane.
vec3 barycentrics(mat3 m_inv, vec2 ndc) {
    vec3 l = m_inv * vec3(ndc, 1.0);
    return l / (l.x + l.y + l.z);
}

Corner load_corner(uint index) {
    uint o = index * VERTEX_FLOATS;
    Corner c;
    c.pos = vec3(u_vertices.data[o], u_vertices.data[o + 1u], u_vertices.data[o + 2u]);
    c.normal = vec3(u_vertices.data[o + 3u], u_vertices.data[o + 4u], u_vertices.data[o + 5u]);
    c.tangent = vec4(u_vertices.data[o + 6u], u_vertices.data[o + 7u], u_vertices.data[o + 8u],
                     u_vertices.data[o + 9u]);
    c.uv = vec2(u_vertices.data[o + 10u], u_vertices.data[o + 11u]);
    return c;
}


void main() {
    ivec2 size = imageSize(u_hdr);
    ivec2 p = ivec2(pc.mesh.zw + gl_GlobalInvocationID.xy);
    if (p.x >= size.x || p.y >= size.y) {
        return;
    }
    uint id = imageLoad(u_vis, p).x;
    if (id >> 24 != pc.material.w) {
        return;
    }
    uint first = pc.mesh.x + 3u * (id & 0xffffffu);
    Corner c0 = load_corner(u_indices.data[first] + pc.mesh.y);
    Corner c1 = load_corner(u_indices.data[first + 1u] + pc.mesh.y);
    Corner c2 = load_corner(u_indices.data[first + 2u] + pc.mesh.y);
    vec3 w0 = (pc.model * vec4(c0.pos, 1.0)).xyz;
    vec3 w1 = (pc.model * vec4(c1.pos, 1.0)).xyz;
    vec3 w2 = (pc.model * vec4(c2.pos, 1.0)).xyz;
    vec4 h0 = u_frame.view_proj * vec4(w0, 1.0);
    vec4 h1 = u_frame.view_proj * vec4(w1, 1.0);
    vec4 h2 = u_frame.view_proj * vec4(w2, 1.0);
    mat3 m_inv = inverse(mat3(h0.xyw, h1.xyw, h2.xyw));

    vec2 step = 2.0 / vec2(size);
    vec2 ndc = (vec2(p) + 0.5) * step - 1.0;
    vec3 b = barycentrics(m_inv, ndc);
    // The gradients as a fragment shader's fine derivatives measure them: the
    // difference to the pixel's partner in its 2x2 quad (right or left, below or
    // above), on the triangle's plane extended as helper invocations extend it.
    vec2 to_x = vec2((p.x & 1) == 0 ? step.x : -step.x, 0.0);
    vec2 to_y = vec2(0.0, (p.y & 1) == 0 ? step.y : -step.y);
    vec3 bx = barycentrics(m_inv, ndc + to_x);
    vec3 by = barycentrics(m_inv, ndc + to_y);

    mat3x2 uvs = mat3x2(c0.uv * pc.uv_scale.xy, c1.uv * pc.uv_scale.xy, c2.uv * pc.uv_scale.xy);
    vec2 uv = uvs * b;
    g_uv_dx = (uvs * bx - uv) * sign(to_x.x);
    g_uv_dy = (uvs * by - uv) * sign(to_y.y);
    if (u_frame.stream.z != 0u && ((uint(p.x) | uint(p.y)) & 7u) == 0u) {
        float side = float(pc.material.y);
        stream_feedback(pc.material.x, pc.material.y, uv, g_uv_dx * side, g_uv_dy * side);
    }
    uint level = pc.material.z;
#ifdef ATLAS_EMULATION
    if (u_frame.tiles.w != 0u && u_frame.stream.y != 0u) {
        // --show-mips: the level the albedo's sample reads.
        sample_atlas(pc.material.x * 3u, uv);
        level = g_atlas_level;
    }
#endif
    if (u_frame.tiles.x != 0u && u_frame.tiles.w == 0u) {
        // Gradients scaled by 2^lift: the anisotropy ratio stays, the level
        // rises by lift (compute shaders have no LOD bias).
        float map_side = float(pc.material.y);
        level = tile_level(pc.material.x, uv, pc.material.y, g_uv_dx * map_side, g_uv_dy * map_side);
#ifdef TILE_MIN_LOD
        g_tile_min_lod = float(level);
#else
        float side = float(pc.material.y);
        float lift = tile_lift(level, g_uv_dx * side, g_uv_dy * side);
        g_uv_dx *= exp2(lift);
        g_uv_dy *= exp2(lift);
#endif
    }

    mat3 nmat = mat3(pc.model); // uniform scale only, as pbr.vert
    vec3 world = mat3(w0, w1, w2) * b;
    vec3 normal = nmat * (mat3(c0.normal, c1.normal, c2.normal) * b);
    vec4 tangent = c0.tangent * b.x + c1.tangent * b.y + c2.tangent * b.z;
    tangent.xyz = nmat * tangent.xyz;
    vec3 color = shade(world, normal, tangent, uv, level, pc.uv_scale.z);
    imageStore(u_hdr, p, vec4(color, 1.0));
}
