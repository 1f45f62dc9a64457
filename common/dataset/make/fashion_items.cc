#include "common/dataset/make/fashion_items.h"

#include <algorithm>

#include "common/dataset/make/palette.h"
#include "common/random.h"

namespace mlcd {

const std::array<const char*, kFashionClasses> kFashionClassNames = {
    "t-shirt", "trouser", "pullover", "dress", "coat",
    "sandal",  "shirt",   "sneaker",  "bag",   "ankle-boot"};

StatusOr<FashionItems> LoadFashionItems(const std::string& dir, const std::string& split) {
  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(FindMnistSplit(dir, split, &images_path, &labels_path));
  FashionItems items;
  MLCD_ASSIGN_OR_RETURN(items.images, ReadIdxImages(images_path));
  MLCD_ASSIGN_OR_RETURN(items.classes, ReadIdxLabels(labels_path));
  if (items.images.rows != kFashionSide || items.images.cols != kFashionSide ||
      static_cast<int64_t>(items.classes.size()) != items.images.count || items.images.count == 0) {
    return Status::FailedPrecondition(
        "'" + images_path + "' and '" + labels_path + "' are not Fashion-MNIST (" +
        std::to_string(items.images.count) + " images of " + std::to_string(items.images.rows) +
        "x" + std::to_string(items.images.cols) + ", " + std::to_string(items.classes.size()) +
        " labels; expected 28x28 images with one label each)");
  }
  for (uint8_t c : items.classes) {
    if (c >= kFashionClasses) {
      return Status::FailedPrecondition("'" + labels_path + "' holds class " + std::to_string(c) +
                                        "; Fashion-MNIST has 10");
    }
  }
  return items;
}

std::array<int64_t, 4> DrawMosaic(uint64_t stream_seed, int64_t i, int64_t num_items) {
  SplitMix rng(StreamSeed(stream_seed, static_cast<uint64_t>(i)));
  std::array<int64_t, 4> tiles;
  for (int64_t& t : tiles) t = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(num_items)));
  return tiles;
}

std::vector<uint8_t> RenderMosaic(const FashionItems& items, const std::array<int64_t, 4>& tiles) {
  std::vector<uint8_t> out(static_cast<size_t>(kMosaicSide) * kMosaicSide);
  for (int t = 0; t < 4; ++t) {
    const uint8_t* src =
        items.images.pixels.data() +
        static_cast<size_t>(tiles[static_cast<size_t>(t)]) * kFashionSide * kFashionSide;
    const int y0 = (t / 2) * kFashionSide, x0 = (t % 2) * kFashionSide;
    for (int y = 0; y < kFashionSide; ++y) {
      std::copy(src + y * kFashionSide, src + (y + 1) * kFashionSide,
                out.begin() + static_cast<ptrdiff_t>((y0 + y) * kMosaicSide + x0));
    }
  }
  return out;
}

std::vector<int32_t> MosaicLabels(const FashionItems& items, const std::array<int64_t, 4>& tiles) {
  std::vector<int32_t> labels;
  for (int64_t t : tiles) labels.push_back(items.classes[static_cast<size_t>(t)]);
  std::sort(labels.begin(), labels.end());
  labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
  return labels;
}

int DrawTint(uint64_t stream_seed, int64_t i) {
  SplitMix rng(StreamSeed(stream_seed, static_cast<uint64_t>(i)));
  return static_cast<int>(rng.Below(kPaletteSize));
}

std::vector<uint8_t> RenderTint(const FashionItems& items, int64_t item, int colour) {
  const uint8_t* src =
      items.images.pixels.data() + static_cast<size_t>(item) * kFashionSide * kFashionSide;
  const uint8_t* rgb = kPalette[static_cast<size_t>(colour)].rgb;
  std::vector<uint8_t> out(static_cast<size_t>(kFashionSide) * kFashionSide * 3);
  for (int p = 0; p < kFashionSide * kFashionSide; ++p) {
    for (int c = 0; c < 3; ++c) {
      out[static_cast<size_t>(p) * 3 + c] = static_cast<uint8_t>((src[p] * rgb[c] + 127) / 255);
    }
  }
  return out;
}

}  // namespace mlcd
