// The activation memory of MulCon's label-attention head (worker/model/label_attention_head.h)
// on one worker's batch: what its forward keeps for the backward, float32. Shared by the
// submit-time check (common/spec_validation.cc, against kMaxActivationBytes) and the worker's
// memory plan (worker/model/model_memory.h), so that both count the same bytes.
//
// Per image, with P patch tokens of width C, L labels of size D, h heads, d_z the projection:
//   token self-attention    10·P·C + 2·h·P²    (q, k, v, heads, output, two LayerNorms and
//                                               the feedforward; scores and softmax)
//   label cross-attention   10·L·D + 2·h·L·P
//   label self-attention    10·L·D + 2·h·L²
//   classifiers, projector  2·L·D + 2·L·d_z
//   bytes = images × 4 × (sum of the above)
#pragma once

#include <cstdint>

namespace mlcd {

struct MulconHeadShape {
  int64_t images = 0;          // one worker's images per step
  int64_t patches = 0;         // P
  int64_t token_dim = 0;       // C, the backbone's width
  int64_t labels = 0;          // L, the class count
  int64_t label_dim = 0;       // D
  int64_t heads = 0;           // h
  int64_t projection_dim = 0;  // d_z
};

inline double MulconHeadActivationBytes(const MulconHeadShape& s) {
  const double P = static_cast<double>(s.patches), C = static_cast<double>(s.token_dim),
               L = static_cast<double>(s.labels), D = static_cast<double>(s.label_dim),
               h = static_cast<double>(s.heads), dz = static_cast<double>(s.projection_dim);
  const double per_image =
      10 * P * C + 2 * h * P * P + 22 * L * D + 2 * h * L * P + 2 * h * L * L + 2 * L * dz;
  return static_cast<double>(s.images) * 4 * per_image;
}

}  // namespace mlcd
