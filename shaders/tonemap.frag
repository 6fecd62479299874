#version 460
// The tone map without bloom (the demo's effects off); see tonemap.glsl.
#extension GL_GOOGLE_include_directive : require
#include "tonemap.glsl"
