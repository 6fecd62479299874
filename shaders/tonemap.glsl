// HDR -> display: exposure, ACES fitted curve (Narkowicz), output to an sRGB target
// (the hardware applies the sRGB transfer function on store; tonemap*.comp encode
// it themselves, with TONEMAP_COMPUTE defined). With BLOOM defined, the bloom image
// (quarter resolution, bilinear) is added before exposure.
layout(set = 0, binding = 0) uniform sampler2D u_hdr;
#ifdef BLOOM
layout(set = 0, binding = 1) uniform sampler2D u_bloom;
const float BLOOM_STRENGTH = 0.35;
#endif
// `panels`: up to two pixel rectangles (x0, y0, x1, y1) the debug overlay
// covers; `dim` scales the colour inside them (the overlay's panel
// background, drawn here for free instead of by blending a second layer over
// a third of a 4K frame); dim = 1 when there is no overlay.
layout(push_constant) uniform Push {
    float exposure;
    float dim;
    vec2 pad;
    vec4 panels[2];
} pc;
#ifndef TONEMAP_COMPUTE
layout(location = 0) in vec2 v_uv;
layout(location = 0) out vec4 o_color;
#endif

vec3 aces(vec3 x) {
    const float a = 2.51, b = 0.03, c = 2.43, d = 0.59, e = 0.14;
    return clamp((x * (a * x + b)) / (x * (c * x + d) + e), 0.0, 1.0);
}

bool inside(vec4 r, vec2 p) {
    return all(greaterThanEqual(p, r.xy)) && all(lessThan(p, r.zw));
}

// The display colour (linear, 0..1) at texture coordinate `uv`, pixel centre `frag`.
vec3 tonemap_at(vec2 uv, vec2 frag) {
    vec3 hdr = textureLod(u_hdr, uv, 0.0).rgb;
#ifdef BLOOM
    hdr += BLOOM_STRENGTH * textureLod(u_bloom, uv, 0.0).rgb;
#endif
    vec3 color = aces(hdr * pc.exposure);
    if (inside(pc.panels[0], frag) || inside(pc.panels[1], frag)) {
        color *= pc.dim;
    }
    return color;
}

#ifndef TONEMAP_COMPUTE
void main() {
    o_color = vec4(tonemap_at(v_uv, gl_FragCoord.xy), 1.0);
}
#endif
