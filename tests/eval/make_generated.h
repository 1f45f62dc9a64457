// A generated dataset (`mlcdctl dataset make`, common/dataset/make/make_dataset.h) for the
// evaluation tests, in one call.
#pragma once

#include <cstdint>
#include <string>

#include "common/dataset/make/make_dataset.h"

namespace mlcd::testing {

// `train` and `test` images of `kind` under `out`, drawn with `seed`; image_size 0 = the kind's.
inline Status MakeGenerated(GeneratedKind kind, const std::string& out, uint64_t seed,
                            int64_t train, int64_t test, int image_size = 0) {
  MakeDatasetOptions make;
  make.kind = kind;
  make.out = out;
  make.seed = seed;
  make.train = train;
  make.test = test;
  make.image_size = image_size;
  return MakeDataset(make).status();
}

}  // namespace mlcd::testing
