// Private to the PartialFc layer (worker/loss/partial_fc*.cc): the shard's state and the
// step, ForwardBackward, as a sequence of named stages over one StepState. Not for other
// callers: the contract is worker/loss/partial_fc.h; the algorithm is docs/loss.md.
//
// The stages, in order (every rank runs all of them, so the collectives match up):
//   ExchangeShapes     local input checks, exchanged (AllGather): same verdict on every rank
//   GatherBatch        embeddings and labels of the global batch (AllGather of packed rows)
//   CollectPositives   labels checked on global data; the distinct positives per sample
//   SampleClasses      this shard's sampled set S (positives + drawn or given negatives)
//   NormalizeRows      normalised embeddings and sampled centres
//   ComputeLogits      cosines, margins, logits, shifted exp-sums of this shard's terms
//   FindShifts         per-sample shifts (analytic bound, or a MAX allreduce for huge scales)
//   ReduceSums         one SUM allreduce of the exp-sums and the statistics
//   LossAndFactors     the loss and the per-sample gradient factors (identical on all ranks)
//   LogitGradients     dL/dc in place of the logits
//   Backward           the GEMMs, the embedding gradient back to its owner, the normalisations
// The device layer (partial_fc_device.cc) runs ExchangeShapes, its own gather, the host plan
// (CollectPositives, SampleClasses) and then the same computation as ATen ops on the layer's
// device (DeviceStep).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/loss/partial_fc.h"

namespace mlcd::worker {

inline constexpr double kNormEps = 1e-12;  // as F.normalize
// Above this, exp(-2U) would underflow double; the layer then finds the shifts with an
// extra MAX allreduce instead of using the analytic bound U.
inline constexpr double kMaxBoundShift = 340.0;

// Backward of x̂ = x / max(|x|, eps) for rows: (g − x̂ (x̂·g)) / max(|x|, eps).
at::Tensor NormalizeRowsBackward(const at::Tensor& g, const at::Tensor& x_hat,
                                 const at::Tensor& norms);

// Everything one ForwardBackward computes, filled stage by stage (the comment of each field
// names the stage that sets it).
struct PartialFcStepState {
  // ExchangeShapes
  int64_t b_local = 0;           // this rank's samples
  int64_t l = 0;                 // label width, the same on every rank
  std::vector<int64_t> sizes;    // samples per rank
  std::vector<int64_t> offsets;  // rank r's samples are [offsets[r], offsets[r + 1])
  int64_t B = 0;                 // the global batch
  int64_t b_max = 0;             // the largest rank's batch
  at::Tensor negatives;          // int64, given negatives (ForwardBackwardWithNegatives)
  // GatherBatch
  at::Tensor E;  // float32 [B, D]
  at::Tensor Y;  // int64 [B, l]
  // CollectPositives: pos_begin[i]..pos_begin[i+1] index the distinct positives of sample i in
  // pos_ids (for softmax: the first label only).
  std::vector<int64_t> pos_begin, pos_ids;
  // SampleClasses: local row indices of S, sorted; rows is the same as a tensor.
  std::vector<int64_t> sampled;
  int64_t m = 0;
  at::Tensor rows;
  // Blocks of samples for the elementwise work (a few parallel regions: many short OpenMP
  // regions between the BLAS calls cost more than the work itself).
  int64_t num_blocks = 1;
  int64_t block_begin(int64_t k) const { return (B * k) / num_blocks; }
  // NormalizeRows
  at::Tensor e_hat, e_norm;  // [B, D], [B]
  at::Tensor w_hat, w_norm;  // [m, D], [m]
  // ComputeLogits. C: [B, m]; cosines, then logits, then exp(z - row max), then dL/dc.
  at::Tensor C;
  at::Tensor over;  // bool [B, m]: |<e, w>| > 1 before the clamp (rounding)
  std::vector<char> block_over;
  std::vector<double> block_cos;
  // Per positive slot q (indexing pos_ids): column in S, cosine, logit; j = -1 when the class
  // is not in this shard.
  std::vector<int64_t> slot_j;
  std::vector<double> slot_c, slot_z;
  at::Tensor row_max;  // float32 [B]
  at::Tensor row_sum;  // float64 [B]
  // Positive entries of this shard: (sample, column in S, cosine, logit).
  struct PosEntry {
    int64_t i, j;
    double c, z;
  };
  std::vector<PosEntry> pos_entries;
  double cos_total = 0;
  double pos_cos_local = 0;
  // FindShifts. Term a: negatives / all of S; term b: positives.
  std::vector<double> shift_a, shift_b;
  // ReduceSums: [0, B) term a, [B, 2B) term b, then five statistics.
  at::Tensor red;
  // LossAndFactors
  std::vector<double> neg_factor, pos_log, pos_coef;
};

struct PartialFc::Impl {
  using Clock = std::chrono::steady_clock;

  PartialFcOptions options;
  Collectives* comm = nullptr;
  ClassRange range;
  int64_t dim = 0;
  at::Tensor weight;      // [n, D] float32
  at::Tensor exp_avg;     // [n, D] float32
  at::Tensor exp_avg_sq;  // [n, D] float32
  at::Tensor row_steps;   // [n] int64
  int64_t step = 0;
  // Updates of OptimizerStep with `apply` that applied and are not yet in `step`: a 0-dim
  // int64 tensor on the state's device, read only when the count is asked for (Steps()).
  at::Tensor unsettled_steps;
  // Pending gradient of the last ForwardBackward.
  bool pending = false;
  at::Tensor pending_rows;  // int64 [m], local row indices, sorted
  at::Tensor pending_grad;  // float32 [m, D]
  // Scratch: position of a local class in the sampled set, -1 when not sampled.
  std::vector<int32_t> position;
  double collective_seconds = 0;

  // step + unsettled_steps (reads the latter on the host).
  int64_t Steps() const;

  // ForwardBackward (worker/loss/partial_fc_step.cc): the stages below in order.
  StatusOr<PartialFcStep> Step(const at::Tensor& local_embeddings, const at::Tensor& local_labels,
                               const at::Tensor* negatives);
  // ForwardBackward of the device layer (worker/loss/partial_fc_device.cc).
  StatusOr<PartialFcStep> DeviceStep(const at::Tensor& local_embeddings,
                                     const at::Tensor& local_labels, const at::Tensor* negatives);

  // Shared by both layers (partial_fc_step.cc).
  Status ExchangeShapes(const at::Tensor& emb_in, const at::Tensor& labels_in,
                        const at::Tensor* negatives_in, PartialFcStepState* st);
  Status CollectPositives(PartialFcStepState* st) const;
  void SampleClasses(bool given_negatives, PartialFcStepState* st);
  Status Timed(const std::function<Status()>& body);

 private:
  double MarginLogit(double c) const;

  Status GatherBatch(const at::Tensor& emb_in, const at::Tensor& labels_in, PartialFcStepState* st);
  // The device layer's gather: embeddings on the device, labels read on the host (the plan).
  Status GatherOnDevice(const at::Tensor& emb_in, const at::Tensor& labels_in,
                        PartialFcStepState* st, std::vector<int64_t>* packed_rows);
  void NormalizeRows(PartialFcStepState* st) const;
  void ComputeLogits(PartialFcStepState* st) const;
  Status FindShifts(PartialFcStepState* st);
  Status ReduceSums(PartialFcStepState* st);
  StatusOr<PartialFcStats> LossAndFactors(PartialFcStepState* st) const;
  void LogitGradients(PartialFcStepState* st) const;
  Status Backward(PartialFcStepState* st, at::Tensor* grad_embeddings, at::Tensor* grad_w);
};

}  // namespace mlcd::worker
