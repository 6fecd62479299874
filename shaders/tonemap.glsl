// HDR -> display: exposure, ACES fitted curve (Narkowicz), output to an sRGB target
// (the hardware applies the sRGB transfer function on store). With BLOOM defined,
// the bloom image (half resolution, bilinear) is added before exposure.
layout(set = 0, binding = 0) uniform sampler2D u_hdr;
#ifdef BLOOM
layout(set = 0, binding = 1) uniform sampler2D u_bloom;
const float BLOOM_STRENGTH = 0.35;
#endif
layout(push_constant) uniform Push { float exposure; } pc;
layout(location = 0) in vec2 v_uv;
layout(location = 0) out vec4 o_color;

vec3 aces(vec3 x) {
    const float a = 2.51, b = 0.03, c = 2.43, d = 0.59, e = 0.14;
    return clamp((x * (a * x + b)) / (x * (c * x + d) + e), 0.0, 1.0);
}

void main() {
    vec3 hdr = texture(u_hdr, v_uv).rgb;
#ifdef BLOOM
    hdr += BLOOM_STRENGTH * texture(u_bloom, v_uv).rgb;
#endif
    o_color = vec4(aces(hdr * pc.exposure), 1.0);
}
