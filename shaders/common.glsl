// Shared declarations of the PBR pass.
#define MAX_LIGHTS 4

struct Light {
    vec4 position;   // xyz; w = 0 directional (xyz = direction towards the light), 1 point
    vec4 color;      // rgb radiance (intensity folded in); a unused
};

layout(set = 0, binding = 0) uniform Frame {
    mat4 view_proj;
    mat4 inv_view_proj;
    vec4 camera_pos;     // xyz
    vec4 sky_color;      // rgb: hemisphere light from above
    vec4 ground_color;   // rgb: hemisphere light from below
    Light lights[MAX_LIGHTS];
    uvec4 light_count;   // x
    uvec4 stream;        // x: max anisotropy; y: --show-mips; z: write streaming feedback;
                         // w: the atlas-filtering emulation's first view (0: off)
    mat4 light_view_proj; // world -> the sun's shadow map (clip space, depth 0..1)
    uvec4 tiles;         // streaming by tiles: x cells per side of a material's residency map
                         // (0: whole levels); y the feedback's first word of cells; z the
                         // filter's margin in texels of the level read; w 1 with the page
                         // atlas (set 0 binding 3 then holds its page table)
} u_frame;

layout(push_constant) uniform Push {
    mat4 model;
    vec4 uv_scale;       // xy: texture repeats; z: normal strength
    uvec4 material;      // x: material index; y: map side in texels (level 0); z: resident level;
                         // w: the draw's id in the visibility buffer (1-based; 0 is the sky)
    uvec4 mesh;          // visibility shading: x first index, y vertex offset, zw the dispatch's
                         // first pixel
} pc;
