// The ten colours of the generated datasets (Trifeature's colour attribute and the tint of
// the Fashion-MNIST two-feature set), far apart in RGB so one linear probe separates them.
#pragma once

#include <array>
#include <cstdint>

namespace mlcd {

struct PaletteColour {
  const char* name;
  uint8_t rgb[3];
};

inline constexpr int kPaletteSize = 10;

inline constexpr std::array<PaletteColour, kPaletteSize> kPalette = {{
    {"red", {230, 25, 75}},
    {"orange", {245, 130, 48}},
    {"yellow", {255, 225, 25}},
    {"green", {60, 180, 75}},
    {"cyan", {70, 240, 240}},
    {"blue", {0, 100, 230}},
    {"purple", {145, 30, 180}},
    {"magenta", {240, 50, 230}},
    {"white", {255, 255, 255}},
    {"brown", {170, 110, 40}},
}};

}  // namespace mlcd
