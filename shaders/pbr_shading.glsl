// The PBR shading shared by the forward fragment shaders (pbr*.frag) and the
// visibility buffer's compute shaders (pbr_shade*.comp). The includer defines
// SAMPLE_MAP(k, uv) for map k (0 albedo, 1 normal, 2 ORM) of the draw's material,
// and SHADE_COMPUTE for the compute shaders (which then call `shade` and
// `stream_feedback` themselves; the fragment shaders get `main` below).
#ifndef SHADE_COMPUTE
layout(location = 0) in vec3 v_world;
layout(location = 1) in vec3 v_normal;
layout(location = 2) in vec4 v_tangent;
layout(location = 3) in vec2 v_uv;
layout(location = 0) out vec4 o_color;

// The LOD bias SAMPLE_MAP samples with when streaming by tiles: what lifts
// the sampler's level to the finest resident one (0 where it is resident).
float g_tile_bias = 0.0;
#endif

// The minimum LOD SAMPLE_MAP samples with when streaming by tiles on a device
// with shaderResourceMinLod (TILE_MIN_LOD: the sampler clamps its own LOD,
// anisotropic filtering included, so no sample reaches an unbound tile).
float g_tile_min_lod = 0.0;
#ifndef SHADE_COMPUTE

// The feedback writes below are side effects: without this, the driver must run
// the shader for fragments the depth test would reject (late Z), shading every
// occluded layer and counting it as coverage. Nothing here writes depth or
// discards, so testing depth first changes no pixel.
layout(early_fragment_tests) in;
#endif

const float PI = 3.14159265359;

#ifdef SHADOWS
// The sun's shadow map (depth from light 0, compared on sampling: 1 lit, 0 shadowed).
layout(set = 0, binding = 2) uniform sampler2DShadow u_shadow;

// How much of the sun (light 0, directional) reaches `world`: 2x2 percentage-closer
// filtering, the point pushed out along the geometric normal against acne.
float sun_visibility(vec3 world, vec3 n_geo, vec3 l) {
    float n_l = clamp(dot(n_geo, l), 0.0, 1.0);
    vec3 p_world = world + n_geo * (0.02 + 0.05 * (1.0 - n_l));
    vec4 p = u_frame.light_view_proj * vec4(p_world, 1.0);
    vec3 s = p.xyz / p.w;
    vec2 uv = s.xy * 0.5 + 0.5;
    if (any(lessThan(uv, vec2(0.0))) || any(greaterThan(uv, vec2(1.0))) || s.z >= 1.0) {
        return 1.0;
    }
    // One tap: the sampler filters linearly with the compare on, so the
    // hardware returns 2x2 percentage-closer filtering. (A 3x3 grid of such
    // taps cost 4.1 ms of a 4K frame on the H200.) The map has one level, so an
    // explicit level 0 is what implicit derivatives would pick, and compute
    // shaders have none.
    return textureLod(u_shadow, vec3(uv, s.z - 0.002), 0.0);
}
#endif

// Streaming feedback, 16 words per material: [0] the finest mip level the
// sampler wanted (x16, fixed point; atomicMin), [1] unused, [2 + l] how many
// sampled pixels wanted level l (the last bin: l >= 13; their sum is the
// material's coverage). One pixel per 8x8 tile writes.
layout(set = 0, binding = 1, std430) buffer Feedback {
    uint words[];
} u_feedback;

// Streaming by tiles (u_frame.tiles.x = g > 0): per material, g x g cells of
// its texture-coordinate square, per cell the finest level whose tiles and every
// coarser level's are resident over the cell's texels widened by the filter's
// reach (bits 0-7) and over its own texels (bits 8-15): see `tile_level`.
layout(set = 0, binding = 3, std430) readonly buffer Residency {
    uint words[];
} u_residency;

// The cell of `uv` (repeating) in a g x g grid.
uint tile_cell(vec2 uv, uint g) {
    uvec2 c = uvec2(clamp(fract(uv) * float(g), vec2(0.0), vec2(float(g) - 0.5)));
    return c.y * g + c.x;
}

// The level the sampler picks (Vulkan's LOD rule with anisotropy), from the
// derivatives of the texel coordinates in the full-size map.
float wanted_lod(vec2 dx, vec2 dy) {
    float px = length(dx);
    float py = length(dy);
    float pmax = max(px, py);
    float pmin = max(min(px, py), 1e-8);
    float n = min(ceil(pmax / pmin), float(max(u_frame.stream.x, 1u)));
    return log2(max(pmax / n, 1e-8));
}

vec3 mip_tint(uint level) {
    const vec3 tints[8] = vec3[8](
        vec3(1.0, 0.1, 0.1), vec3(1.0, 0.5, 0.0), vec3(1.0, 1.0, 0.1), vec3(0.2, 1.0, 0.2),
        vec3(0.1, 1.0, 1.0), vec3(0.2, 0.3, 1.0), vec3(0.7, 0.2, 1.0), vec3(0.6, 0.6, 0.6));
    return tints[min(level, 7u)];
}

float d_ggx(float n_h, float a) {
    float a2 = a * a;
    float d = n_h * n_h * (a2 - 1.0) + 1.0;
    return a2 / (PI * d * d);
}

float v_smith_ggx(float n_v, float n_l, float a) {
    float a2 = a * a;
    float gv = n_l * sqrt(n_v * n_v * (1.0 - a2) + a2);
    float gl = n_v * sqrt(n_l * n_l * (1.0 - a2) + a2);
    return 0.5 / max(gv + gl, 1e-5);
}

vec3 f_schlick(float v_h, vec3 f0) {
    return f0 + (1.0 - f0) * pow(1.0 - v_h, 5.0);
}

// Streaming feedback of one sampled pixel of `material` (map side `map_size`
// texels at level 0) at `uv`, from the texel-coordinate derivatives `tdx`,
// `tdy`; by tiles also per cell: the finest LOD x16 and the hits.
void stream_feedback(uint material, uint map_size, vec2 uv, vec2 tdx, vec2 tdy) {
    float lod = clamp(wanted_lod(tdx, tdy), 0.0, 31.0);
    uint base = material * 16u;
    atomicMin(u_feedback.words[base], uint(lod * 16.0));
    atomicAdd(u_feedback.words[base + 2u + min(uint(lod), 13u)], 1u);
    uint g = u_frame.tiles.x;
    if (g != 0u) {
        uint cell = u_frame.tiles.y + 2u * (material * g * g + tile_cell(uv, g));
        atomicMin(u_feedback.words[cell], uint(lod * 16.0));
        atomicAdd(u_feedback.words[cell + 1u], 1u);
    }
}

// Streaming by tiles: the residency map's word for cell (x, y) of `material`:
// bits 0-7 the cell's safe level (resident over its whole widened footprint),
// bits 8-15 its inner level (resident over its own texels).
uint tile_word(uint material, uint g, uint x, uint y) {
    return u_residency.words[material * g * g + y * g + x];
}

float lod_lower_bound(vec2 dx, vec2 dy);

// Where the sampler has no minimum LOD, the levels of detail `tile_lift`'s bias
// adds beyond the resident level: the sampler's own computation may fall short of
// the exact rule (on Mesa 25.0.7's llvmpipe a margin of 1/16 still let 2 of 240
// frames read tiles the map calls absent, measured by assigning the pages in
// reverse; 1/8 none). `tiles::sample::BIAS_MARGIN` is the same number.
const float TILE_BIAS_MARGIN = 1.0 / 8.0;

// Streaming by tiles: the level a sample at `uv` of `material` (maps of `size`
// texels at level 0; texel-coordinate derivatives `tdx`, `tdy`) is clamped to.
// The cell's inner level where the filter, at the coarsest level the sampler
// may read (its LOD is at most two above `lod_lower_bound`, or the clamp plus
// one with the bias), stays within the cell or reaches only neighbours whose
// inner level is no finer; else the coarser one, tried again; else the safe
// level. u_frame.tiles.z is the filter's margin in texels of the level read.
// `tiles::sample::tile_level` is this function in Rust, property-tested
// against the tiles resident: change both together.
uint tile_level(uint material, vec2 uv, uint size, vec2 tdx, vec2 tdy) {
    uint g = u_frame.tiles.x;
    vec2 cellf = fract(uv) * float(g);
    uvec2 c = uvec2(clamp(cellf, vec2(0.0), vec2(float(g) - 0.5)));
    uint word = tile_word(material, g, c.x, c.y);
    uint safe = word & 0xffu;
    uint level = (word >> 8u) & 0xffu;
    vec2 f = clamp(cellf - vec2(c), vec2(0.0), vec2(1.0));
    float cell_texels = float(size) / float(g);
    float lod_lo = lod_lower_bound(tdx, tdy);
    for (int i = 0; i < 4; i++) {
        if (level >= safe) {
            return safe;
        }
        float lod_max = max(lod_lo + 2.0, float(level) + 1.0 + TILE_BIAS_MARGIN);
        float reach = float(u_frame.tiles.z + 2u) * exp2(floor(max(lod_max, 0.0))) / cell_texels;
        if (reach >= 1.0) {
            return safe;
        }
        uint next = level;
        for (int dy = -1; dy <= 1; dy++) {
            for (int dx = -1; dx <= 1; dx++) {
                bool nx = dx == 0 || (dx < 0 ? f.x < reach : f.x > 1.0 - reach);
                bool ny = dy == 0 || (dy < 0 ? f.y < reach : f.y > 1.0 - reach);
                if ((dx != 0 || dy != 0) && nx && ny) {
                    uint x = uint((int(c.x) + dx + int(g)) % int(g));
                    uint y = uint((int(c.y) + dy + int(g)) % int(g));
                    next = max(next, (tile_word(material, g, x, y) >> 8u) & 0xffu);
                }
            }
        }
        if (next == level) {
            return level;
        }
        level = next;
    }
    return safe;
}

// The lowest level of detail a conforming sampler may compute from the
// texel-coordinate derivatives `dx`, `dy`: the specification lets it
// approximate each derivative's length by anything from its largest component
// up to the sum of its components (llvmpipe takes the largest), so the
// largest component bounds it from below (up to half a level under
// `wanted_lod` for a diagonal derivative). Anisotropy as `wanted_lod`.
float lod_lower_bound(vec2 dx, vec2 dy) {
    float px = max(abs(dx.x), abs(dx.y));
    float py = max(abs(dy.x), abs(dy.y));
    float pmax = max(px, py);
    float pmin = max(min(px, py), 1e-8);
    float n = min(ceil(pmax / pmin), float(max(u_frame.stream.x, 1u)));
    return log2(max(pmax / n, 1e-8));
}

// How many levels the sampler's level of detail, from the texel-coordinate
// derivatives `tdx`, `tdy`, must rise to reach resident `level`, whichever
// approximation of the lengths the sampler makes (`lod_lower_bound`), plus
// TILE_BIAS_MARGIN (for a sampler whose own LOD falls short of the rule; at or
// above the level itself trilinear filtering takes nothing of the next finer
// one). Level 0 needs none.
float tile_lift(uint level, vec2 tdx, vec2 tdy) {
    if (level == 0u) {
        return 0.0;
    }
    float lod = max(lod_lower_bound(tdx, tdy), -16.0);
    return max(float(level) + TILE_BIAS_MARGIN - lod, 0.0);
}

// The lit colour of a surface point: `world` position, interpolated `normal` and
// `tangent` (w: bitangent sign), texture coordinate `uv`; `resident_level` tints
// with --show-mips; `normal_strength` scales the normal map.
vec3 shade(vec3 world, vec3 normal, vec4 tangent, vec2 uv, uint resident_level, float normal_strength) {
    vec3 albedo = SAMPLE_MAP(0, uv).rgb;
    vec2 nxy = SAMPLE_MAP(1, uv).xy * 2.0 - 1.0;
    nxy *= normal_strength;
    vec3 n_ts = vec3(nxy, sqrt(max(1.0 - dot(nxy, nxy), 0.0)));
    vec3 orm = SAMPLE_MAP(2, uv).rgb;
    float ao = orm.r;
    float roughness = clamp(orm.g, 0.045, 1.0);
    float metallic = orm.b;

    vec3 n_geo = normalize(normal);
    vec3 t = normalize(tangent.xyz - n_geo * dot(n_geo, tangent.xyz));
    vec3 b = cross(n_geo, t) * tangent.w;
    vec3 n = normalize(mat3(t, b, n_geo) * n_ts);

    vec3 v = normalize(u_frame.camera_pos.xyz - world);
    float n_v = clamp(dot(n, v), 1e-4, 1.0);
    float a = roughness * roughness;
    vec3 f0 = mix(vec3(0.04), albedo, metallic);
    vec3 diffuse_color = albedo * (1.0 - metallic);

    vec3 color = vec3(0.0);
    for (uint i = 0; i < u_frame.light_count.x; ++i) {
        Light light = u_frame.lights[i];
        vec3 l;
        vec3 radiance = light.color.rgb;
        if (light.position.w == 0.0) {
            l = normalize(light.position.xyz);
        } else {
            vec3 d = light.position.xyz - world;
            float dist2 = max(dot(d, d), 1e-4);
            l = d * inversesqrt(dist2);
            radiance /= dist2;
        }
        vec3 h = normalize(v + l);
        float n_l = clamp(dot(n, l), 0.0, 1.0);
        if (n_l <= 0.0) continue;
#ifdef SHADOWS
        if (i == 0u && light.position.w == 0.0) {
            radiance *= sun_visibility(world, n_geo, l);
        }
#endif
        float n_h = clamp(dot(n, h), 0.0, 1.0);
        float v_h = clamp(dot(v, h), 0.0, 1.0);
        vec3 f = f_schlick(v_h, f0);
        vec3 spec = d_ggx(n_h, a) * v_smith_ggx(n_v, n_l, a) * f;
        vec3 diff = (1.0 - f) * diffuse_color / PI;
        color += (diff + spec) * radiance * n_l;
    }
    // Hemisphere ambient (diffuse) plus a crude environment specular from the same sky.
    float up = n.y * 0.5 + 0.5;
    vec3 ambient = mix(u_frame.ground_color.rgb, u_frame.sky_color.rgb, up);
    vec3 r = reflect(-v, n);
    vec3 env = mix(u_frame.ground_color.rgb, u_frame.sky_color.rgb, r.y * 0.5 + 0.5);
    vec3 f_env = f0 + (max(vec3(1.0 - roughness), f0) - f0) * pow(1.0 - n_v, 5.0);
    color += ao * (diffuse_color * ambient + f_env * env * (1.0 - 0.7 * roughness));
    if (u_frame.stream.y != 0u) {
        // --show-mips: tint by the resident level (red 0, orange 1, yellow 2, ...).
        float l = dot(color, vec3(0.2126, 0.7152, 0.0722));
        color = mip_tint(resident_level) * (0.05 + l);
    }
    return color;
}

#ifndef SHADE_COMPUTE
void main() {
    // Derivatives first, in uniform control flow.
    vec2 texel = v_uv * float(pc.material.y);
    vec2 tdx = dFdx(texel);
    vec2 tdy = dFdy(texel);
    if (u_frame.stream.z != 0u && ((uint(gl_FragCoord.x) | uint(gl_FragCoord.y)) & 7u) == 0u) {
        stream_feedback(pc.material.x, pc.material.y, v_uv, tdx, tdy);
    }
    uint level = pc.material.z;
    if (u_frame.tiles.x != 0u) {
        // A bias, not explicit gradients: the implicit derivatives stay the
        // sampler's own, so a resident region samples exactly as without tiles.
        level = tile_level(pc.material.x, v_uv, pc.material.y, tdx, tdy);
#ifdef TILE_MIN_LOD
        g_tile_min_lod = float(level);
#else
        g_tile_bias = tile_lift(level, tdx, tdy);
#endif
    }
    o_color = vec4(shade(v_world, v_normal, v_tangent, v_uv, level, pc.uv_scale.z), 1.0);
}
#endif
