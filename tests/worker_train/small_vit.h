// The ViT the worker's tests train and compare: 28 x 28 grey images in 7 x 7 patches (17
// tokens), width 32, 2 blocks of 4 heads, a 24-wide embedding. Small enough for finite
// differences and for several ranks in one test process.
#pragma once

#include "worker/model/vit.h"

namespace mlcd::worker {

inline VitOptions SmallTestVit(VitPooling pooling = VitPooling::kCls) {
  VitOptions o;
  o.image_size = 28;
  o.patch_size = 7;
  o.channels = 1;
  o.width = 32;
  o.depth = 2;
  o.heads = 4;
  o.embed_dim = 24;
  o.pooling = pooling;
  return o;
}

}  // namespace mlcd::worker
