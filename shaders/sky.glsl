// The sky's colour in the direction through `ndc` (normalized device x, y):
// shared by sky.frag (forward shading) and sky.comp (the visibility buffer).
vec3 sky_color(vec2 ndc) {
    vec4 far = u_frame.inv_view_proj * vec4(ndc, 0.0001, 1.0);
    vec3 dir = normalize(far.xyz / far.w - u_frame.camera_pos.xyz);
    float up = clamp(dir.y, -1.0, 1.0);
    vec3 zenith = u_frame.sky_color.rgb * 0.6;
    vec3 horizon = u_frame.sky_color.rgb * 1.6 + vec3(0.08, 0.06, 0.04);
    vec3 color = mix(horizon, zenith, sqrt(max(up, 0.0)));
    color = mix(color, u_frame.ground_color.rgb, smoothstep(0.0, -0.2, up));
    // A soft sun glow towards the first (directional) light.
    vec3 sun = normalize(u_frame.lights[0].position.xyz);
    float s = max(dot(dir, sun), 0.0);
    color += u_frame.lights[0].color.rgb * (pow(s, 600.0) * 20.0 + pow(s, 12.0) * 0.12);
    return color;
}
