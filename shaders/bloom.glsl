// Bloom in one pass at quarter resolution: the bright part of the HDR frame (a soft
// threshold at 1.0), blurred by a 3x3 tent of bilinear taps four full-resolution
// texels apart (each tap averages 2x2 texels: about 10 pixels across, widened by the
// tone map's bilinear upsampling). Nine taps, not 49: on the H200 the 7x7 version
// cost 3.97 ms at 4K, this one is meant to cost a tenth of that.
layout(set = 0, binding = 0) uniform sampler2D u_hdr;

vec3 bright(vec3 c) {
    float peak = max(max(c.r, c.g), c.b);
    float knee = clamp(peak - 0.8, 0.0, 0.4);
    float weight = max(knee * knee / 1.6, peak - 1.0) / max(peak, 1e-4);
    return c * weight;
}

// The bloom at texture coordinate `uv` of the bloom image.
vec3 bloom_at(vec2 uv) {
    vec2 texel = 1.0 / vec2(textureSize(u_hdr, 0));
    vec3 sum = vec3(0.0);
    float total = 0.0;
    for (int y = -1; y <= 1; ++y) {
        for (int x = -1; x <= 1; ++x) {
            float w = float((2 - abs(x)) * (2 - abs(y)));
            vec2 at = uv + vec2(x, y) * 4.0 * texel;
            sum += w * bright(min(textureLod(u_hdr, at, 0.0).rgb, vec3(64.0)));
            total += w;
        }
    }
    return sum / total;
}
