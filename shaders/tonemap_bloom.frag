#version 460
// The tone map with bloom (the demo's effects on); see tonemap.glsl.
#extension GL_GOOGLE_include_directive : require
#define BLOOM
#include "tonemap.glsl"
