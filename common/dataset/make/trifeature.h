// Trifeature (Hermann & Lampinen 2020; the MCL paper's Sec. 5.1), drawn procedurally: one
// shape (10) filled with one texture (10) in one colour (10), at a random position and
// rotation, on a dark grey background. The three attributes are drawn independently and
// uniformly. docs/data.md, "Generated datasets", shows the classes.
//
// Geometry: the shape fits a disc of radius 0.34 S (S = image side) whose centre is uniform
// in [R + 1, S - R - 1]^2; the rotation is uniform (a point drawn uniformly in the unit disc
// by rejection, normalised). Each pixel is sampled once at its centre, mapped into the
// shape's own frame (unit radius), tested against the shape and given the texture's "on"
// colour or its "off" shade (the colour at 2/5). Textures are laid out in the shape's frame
// at 2 periods per radius, so they turn with the shape. Every step is IEEE-exact (+ - * /
// sqrt floor, compiled without FMA contraction) on integer draws from SplitMix64, so the
// pixels are the same on every machine.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace mlcd {

inline constexpr int kTrifeatureShapes = 10;
inline constexpr int kTrifeatureTextures = 10;
inline constexpr int kTrifeatureColours = 10;
extern const std::array<const char*, kTrifeatureShapes> kTrifeatureShapeNames;
extern const std::array<const char*, kTrifeatureTextures> kTrifeatureTextureNames;

// Everything drawn for one image.
struct TrifeatureDraw {
  int shape = 0, texture = 0, colour = 0;
  double centre_x = 0, centre_y = 0;  // pixels
  double cos = 1, sin = 0;            // rotation
  uint64_t noise_seed = 0;            // the "noise" texture's pixels
};

// The draws of image `i` of the stream `stream_seed` (one stream per split) at side `size`.
TrifeatureDraw DrawTrifeature(uint64_t stream_seed, int64_t i, int size);

// The image of `draw`: size x size x 3 (HWC, RGB).
std::vector<uint8_t> RenderTrifeature(const TrifeatureDraw& draw, int size);

// Whether the point (x, y) of the shape's unit frame is inside `shape` (exposed for tests).
// Every shape lies inside the unit disc.
bool InsideTrifeatureShape(int shape, double x, double y);

}  // namespace mlcd
