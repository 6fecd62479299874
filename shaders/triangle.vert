#version 460
// The smoke-test triangle: three vertices from gl_VertexIndex, no buffers.
layout(location = 0) out vec3 v_color;

const vec2 POS[3] = vec2[](vec2(0.0, -0.7), vec2(0.7, 0.6), vec2(-0.7, 0.6));
const vec3 COL[3] = vec3[](vec3(1.0, 0.1, 0.1), vec3(0.1, 1.0, 0.1), vec3(0.1, 0.2, 1.0));

void main() {
    gl_Position = vec4(POS[gl_VertexIndex], 0.5, 1.0);
    v_color = COL[gl_VertexIndex];
}
