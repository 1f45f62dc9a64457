#include "common/dataset/make/trifeature.h"

#include <cmath>

#include "common/dataset/make/palette.h"
#include "common/random.h"

namespace mlcd {

const std::array<const char*, kTrifeatureShapes> kTrifeatureShapeNames = {
    "triangle", "square",   "plus", "circle",    "tee",
    "rhombus",  "pentagon", "star", "trapezoid", "ell"};
const std::array<const char*, kTrifeatureTextures> kTrifeatureTextureNames = {
    "solid", "stripes", "grid", "checker", "dots", "rings", "zigzag", "noise", "pinwheel", "half"};

namespace {

// The shape's radius as a fraction of the image side, and texture periods per radius.
constexpr double kRadiusFraction = 0.34;
constexpr double kTexturePeriods = 2;
constexpr uint8_t kBackground = 40;

struct Point {
  double x, y;
};

// Vertices of the regular polygons, written out (cos and sin of multiples of 72 and 36
// degrees) so no libm call decides a pixel.
constexpr Point kTriangle[] = {{0, 1}, {-0.8660254037844386, -0.5}, {0.8660254037844386, -0.5}};
constexpr Point kPentagon[] = {{0, 0.95},
                               {-0.9035036904803958, 0.2935661446562001},
                               {-0.5583959896778495, -0.7685661446562},
                               {0.5583959896778492, -0.7685661446562001},
                               {0.9035036904803959, 0.2935661446561998}};
constexpr Point kStar[] = {{0, 1},
                           {-0.23511410091698923, 0.323606797749979},
                           {-0.9510565162951535, 0.3090169943749475},
                           {-0.3804226065180615, -0.12360679774997892},
                           {-0.5877852522924732, -0.8090169943749473},
                           {0, -0.4},
                           {0.5877852522924729, -0.8090169943749476},
                           {0.3804226065180614, -0.12360679774997906},
                           {0.9510565162951536, 0.3090169943749472},
                           {0.23511410091698937, 0.3236067977499789}};

// Even-odd crossing test.
template <size_t N>
bool InPolygon(const Point (&v)[N], double x, double y) {
  bool inside = false;
  for (size_t i = 0, j = N - 1; i < N; j = i++) {
    if ((v[i].y > y) != (v[j].y > y) &&
        x < (v[j].x - v[i].x) * (y - v[i].y) / (v[j].y - v[i].y) + v[i].x) {
      inside = !inside;
    }
  }
  return inside;
}

bool InBox(double x, double y, double x0, double x1, double y0, double y1) {
  return x >= x0 && x <= x1 && y >= y0 && y <= y1;
}

double Frac(double v) { return v - std::floor(v); }

// Whether texture `texture` is "on" at (u, v) of the shape's frame in texture periods; (px,
// py) is the pixel (the noise texture's cell).
bool TextureOn(int texture, double u, double v, int px, int py, uint64_t noise_seed) {
  switch (texture) {
    case 0:  // solid
      return true;
    case 1:  // stripes
      return Frac(v) < 0.5;
    case 2:  // grid
      return Frac(u) < 0.3 || Frac(v) < 0.3;
    case 3:  // checker
      return (static_cast<int64_t>(std::floor(u)) + static_cast<int64_t>(std::floor(v))) % 2 == 0;
    case 4: {  // dots
      const double du = Frac(u) - 0.5, dv = Frac(v) - 0.5;
      return du * du + dv * dv < 0.09;
    }
    case 5:  // rings
      return Frac(std::sqrt(u * u + v * v)) < 0.5;
    case 6:  // zigzag
      return Frac(v + std::fabs(Frac(u) - 0.5)) < 0.5;
    case 7:  // noise
      return (Mix64(noise_seed ^ (static_cast<uint64_t>(py) << 32 | static_cast<uint32_t>(px))) &
              1) != 0;
    case 8:  // pinwheel: eight sectors, alternating
      return ((u > 0) ^ (v > 0) ^ (std::fabs(u) > std::fabs(v))) != 0;
    default:  // half
      return v > 0;
  }
}

}  // namespace

bool InsideTrifeatureShape(int shape, double x, double y) {
  switch (shape) {
    case 0:
      return InPolygon(kTriangle, x, y);
    case 1:
      return InBox(x, y, -0.7, 0.7, -0.7, 0.7);
    case 2:
      return InBox(x, y, -0.3, 0.3, -0.9, 0.9) || InBox(x, y, -0.9, 0.9, -0.3, 0.3);
    case 3:
      return x * x + y * y <= 0.85 * 0.85;
    case 4:
      return InBox(x, y, -0.7, 0.7, 0.3, 0.7) || InBox(x, y, -0.22, 0.22, -0.8, 0.3);
    case 5:
      return std::fabs(x) / 0.95 + std::fabs(y) / 0.5 <= 1;
    case 6:
      return InPolygon(kPentagon, x, y);
    case 7:
      return InPolygon(kStar, x, y);
    case 8:
      return y >= -0.5 && y <= 0.5 && std::fabs(x) <= 0.65 - 0.4 * y;
    default:
      return InBox(x, y, -0.6, -0.15, -0.7, 0.7) || InBox(x, y, -0.6, 0.6, -0.7, -0.25);
  }
}

TrifeatureDraw DrawTrifeature(uint64_t stream_seed, int64_t i, int size) {
  SplitMix rng(StreamSeed(stream_seed, static_cast<uint64_t>(i)));
  TrifeatureDraw d;
  d.shape = static_cast<int>(rng.Below(kTrifeatureShapes));
  d.texture = static_cast<int>(rng.Below(kTrifeatureTextures));
  d.colour = static_cast<int>(rng.Below(kTrifeatureColours));
  const double radius = kRadiusFraction * size;
  const double span = size - 2 * (radius + 1);
  d.centre_x = radius + 1 + span * (1 - rng.Uniform());
  d.centre_y = radius + 1 + span * (1 - rng.Uniform());
  while (true) {
    const double a = 2 * (1 - rng.Uniform()) - 1, b = 2 * (1 - rng.Uniform()) - 1;
    const double r2 = a * a + b * b;
    if (r2 > 0.01 && r2 <= 1) {
      const double r = std::sqrt(r2);
      d.cos = a / r;
      d.sin = b / r;
      break;
    }
  }
  d.noise_seed = rng.Next();
  return d;
}

std::vector<uint8_t> RenderTrifeature(const TrifeatureDraw& d, int size) {
  std::vector<uint8_t> out(static_cast<size_t>(size) * size * 3, kBackground);
  const double radius = kRadiusFraction * size;
  const uint8_t* on = kPalette[static_cast<size_t>(d.colour)].rgb;
  const uint8_t off[3] = {static_cast<uint8_t>(on[0] * 2 / 5), static_cast<uint8_t>(on[1] * 2 / 5),
                          static_cast<uint8_t>(on[2] * 2 / 5)};
  for (int py = 0; py < size; ++py) {
    for (int px = 0; px < size; ++px) {
      const double dx = px + 0.5 - d.centre_x, dy = py + 0.5 - d.centre_y;
      // Into the shape's frame: rotate by -angle, scale to unit radius; y up.
      const double x = (d.cos * dx + d.sin * dy) / radius;
      const double y = -(-d.sin * dx + d.cos * dy) / radius;
      if (!InsideTrifeatureShape(d.shape, x, y)) continue;
      const bool lit =
          TextureOn(d.texture, x * kTexturePeriods, y * kTexturePeriods, px, py, d.noise_seed);
      uint8_t* p = out.data() + (static_cast<size_t>(py) * size + px) * 3;
      for (int c = 0; c < 3; ++c) p[c] = lit ? on[c] : off[c];
    }
  }
  return out;
}

}  // namespace mlcd
