#version 460
// Bloom in one pass at half resolution: the bright part of the HDR frame (a soft
// threshold at 1.0), blurred by a 7x7 Gaussian of bilinear taps three full-resolution
// texels apart (about 20 pixels across). The tone map adds it back, upsampled.
layout(set = 0, binding = 0) uniform sampler2D u_hdr;
layout(location = 0) in vec2 v_uv;
layout(location = 0) out vec4 o_color;

vec3 bright(vec3 c) {
    float peak = max(max(c.r, c.g), c.b);
    float knee = clamp(peak - 0.8, 0.0, 0.4);
    float weight = max(knee * knee / 1.6, peak - 1.0) / max(peak, 1e-4);
    return c * weight;
}

void main() {
    vec2 texel = 1.0 / vec2(textureSize(u_hdr, 0));
    vec3 sum = vec3(0.0);
    float total = 0.0;
    for (int y = -3; y <= 3; ++y) {
        for (int x = -3; x <= 3; ++x) {
            float w = exp(-float(x * x + y * y) / 4.5);
            vec2 uv = v_uv + vec2(x, y) * 3.0 * texel;
            sum += w * bright(min(texture(u_hdr, uv).rgb, vec3(64.0)));
            total += w;
        }
    }
    o_color = vec4(sum / total, 1.0);
}
