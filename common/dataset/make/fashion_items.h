// The generated datasets made of Fashion-MNIST items (docs/data.md, "Generated datasets"):
// - Fashion mosaics: a 2x2 grid (56x56 grey) of four items drawn uniformly with replacement
//   from the split's images; its labels are the set of classes present (1 to 4 of 10).
// - Fashion tint: item i of the split (in IDX order) tinted with one of the ten palette colours
//   (common/dataset/make/palette.h) drawn independently of its class: 28x28 RGB, attributes
//   `class` and `colour`. Colour is the easy, dominant feature (the mean pixel gives it);
//   class is the harder one it suppresses.
// Draws come from SplitMix64 streams, one per (seed, split) and sample, so sample i does not
// depend on how many samples are made.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/idx.h"
#include "common/status.h"

namespace mlcd {

inline constexpr int kFashionClasses = 10;
inline constexpr int kFashionSide = 28;
inline constexpr int kMosaicSide = 2 * kFashionSide;
extern const std::array<const char*, kFashionClasses> kFashionClassNames;

// One split of Fashion-MNIST: 28x28 grey images and their classes.
struct FashionItems {
  IdxImages images;
  std::vector<uint8_t> classes;
};

// Reads `split` ("train" or "test") from `dir` (common/idx.h). NOT_FOUND with the install
// hint when the files are missing.
StatusOr<FashionItems> LoadFashionItems(const std::string& dir, const std::string& split);

// The four items of mosaic `i` (row-major: top-left, top-right, bottom-left, bottom-right).
std::array<int64_t, 4> DrawMosaic(uint64_t stream_seed, int64_t i, int64_t num_items);
// Its image (56x56 grey) and its label set (distinct classes, ascending).
std::vector<uint8_t> RenderMosaic(const FashionItems& items, const std::array<int64_t, 4>& tiles);
std::vector<int32_t> MosaicLabels(const FashionItems& items, const std::array<int64_t, 4>& tiles);

// The palette colour of tinted item `i`.
int DrawTint(uint64_t stream_seed, int64_t i);
// Item `item` tinted with palette colour `colour`: 28x28x3 (HWC), channel c of a pixel of grey
// value g is (g * colour_c + 127) / 255.
std::vector<uint8_t> RenderTint(const FashionItems& items, int64_t item, int colour);

}  // namespace mlcd
