// PartialFc: the sharded classification layer of MLCD (paper Eq. 3-6 and appendix A.1), with
// PartialFC-style sampling of class centres, its own analytic backward and its own sparse
// AdamW. The full definitions, the per-step algorithm and the checkpoint form are in
// docs/loss.md; the summary:
//
// Model parallel by contiguous class range: rank ρ of W owns the centres of classes
// ShardClassRange(K, W, ρ) = [floor(Kρ/W), floor(K(ρ+1)/W)). The backbone is data parallel:
// every rank passes its own B_local x D embeddings and B_local x l labels (int64, < 0 =
// padding) of the step's global batch (the global batch is the ranks' batches in rank order).
//
// Per sample i of the global batch (B samples), with e_i and w_c L2-normalised,
// c_ic = clamp(<e_i, w_c>, -1, 1), scale s, margin m, P_i = the distinct valid labels of i:
//   positive logit z_ip = s·cos(arccos c_ip + m) (kArc), s·(c_ip − m) (kCos), s·c_ip (kNone);
//   negative logit z_in = s·c_in for n ∈ S ∖ P_i, S = the step's sampled class set;
//   kMlcd:    L_i = log(1 + Σ_{p∈P_i} exp(−z_ip)) + log(1 + Σ_{n∈S∖P_i} exp(z_in))   (Eq. 6)
//   kMlc:     L_i = log(1 + Σ_{n∈S∖P_i} exp(z_in) · Σ_{p∈P_i} exp(−z_ip))          (Eq. 4)
//   kSoftmax: L_i = −z_it + log Σ_{c∈S} exp(z_ic), t = labels[i][0] (the only positive;
//             the sample contributes 0 when labels[i][0] < 0)                       (Eq. 3)
//   L = (1/B) Σ_i L_i.
// Gradient through the margin follows PartialFC: the positive logit's value carries the
// margin, its derivative is taken as for s·c (dz/dc = s).
//
// Sampled set per step and shard: every valid label of the global batch that falls in the
// shard, plus uniformly drawn other classes of the shard up to ceil(r · shard size) in total
// (only the positives when they alone exceed that), redrawn every step from a generator
// seeded by (seed, step, shard begin) -- so a resumed run draws the same sets. Only the
// sampled rows are read, normalised and updated.
//
// Usage by the trainer (every rank, same order):
//   auto comm = Collectives::Create(...);                 // worker/dist/collectives.h
//   auto pfc = PartialFc::Create(options, comm.get());
//   at::Tensor emb = model(x);                            // B_local x D
//   auto r = pfc->ForwardBackward(emb.detach(), labels);  // StatusOr<PartialFcStep>
//   emb.backward(r->grad_embeddings);                     // dL/d emb, L = global mean
//   <allreduce backbone gradients (sum: L is already the global mean)>; opt.step();
//   pfc->OptimizerStep(lr);                               // sparse AdamW on sampled rows
// Errors: every rank returns the same error for bad input (shapes, dtypes and labels are
// checked after exchanging them, on global data), so ranks never diverge into a hang;
// collective failures come from Collectives (UNAVAILABLE / DEADLINE_EXCEEDED).
//
// The implementation: partial_fc.cc (creation, options, the optimizer step and checkpoint
// entry points), partial_fc_step.cc (ForwardBackward as named stages, listed in
// partial_fc_impl.h), sparse_adamw.h (the optimizer), partial_fc_state.h (the checkpoint form).
//
// Two implementations of this one contract, chosen by PartialFcOptions::layer:
//  - kHost (partial_fc_step.cc): the fused CPU layer. The shard lives in host memory and the
//    tensors are CPU tensors. Threads: BLAS's for the GEMMs, PartialFcOptions::compute_threads
//    for the rest of ForwardBackward, ATen's intra-op setting for OptimizerStep.
//  - kDevice (partial_fc_device.cc): the shard, its moments and row steps live on
//    PartialFcOptions::device; the host plans (labels, positives, the same seeded draws) and
//    sends the index tensors in one copy; the per-row work is ATen ops on that device
//    (also on CPU tensors, where CI tests it against kHost). Embeddings and the returned
//    gradient are on that device; labels on the host. The collectives are Collectives'
//    (NCCL on CUDA). The host reads the loss once per step, and at world size > 1 the
//    exchanged shapes and the gathered labels its plan needs.
// Both draw the same sampled sets and write the same checkpoint files, so either resumes the
// other's checkpoints. Embeddings float32, labels int64 (int32 accepted).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/enums.h"
#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// The loss variant and margin type are the project's enumerations (common/enums.h: "mlcd" |
// "mlc" | "softmax"; "arc" | "cos" | "none"; parsed once at the edge).
using ::mlcd::LossVariant;
using ::mlcd::LossVariantName;
using ::mlcd::MarginType;
using ::mlcd::MarginTypeName;
using ::mlcd::ParseLossVariant;
using ::mlcd::ParseMarginType;

// A half-open range of class ids [begin, end).
struct ClassRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t c) const { return c >= begin && c < end; }
  bool operator==(const ClassRange& o) const { return begin == o.begin && end == o.end; }
};

// The classes rank `rank` of `world_size` owns: [floor(K·rank/W), floor(K·(rank+1)/W)).
// Ranges are contiguous, cover [0, K) and differ in size by at most one; with K < W some
// ranks own no class (that works: they contribute nothing to the sums).
ClassRange ShardClassRange(int64_t num_classes, int world_size, int rank);

// Which implementation runs the layer: "host" | "device" (parsed once, at the edge).
enum class PartialFcLayer { kHost, kDevice };
StatusOr<PartialFcLayer> ParsePartialFcLayer(const std::string& name);
const char* PartialFcLayerName(PartialFcLayer layer);

struct PartialFcOptions {
  int64_t num_classes = 0;    // k, the number of class centres (clusters)
  int64_t embedding_dim = 0;  // D
  double sample_ratio = 0.1;  // r in (0, 1]: per shard, ceil(r · shard size) sampled classes
  LossVariant variant = LossVariant::kMlcd;
  MarginType margin_type = MarginType::kArc;
  double scale = 32.0;  // s, > 0
  double margin = 0.3;  // m
  uint64_t seed = 0;    // initialisation and the per-step sampling
  // Centres start as N(0, init_std²) entries, a function of (seed, class id) only, so the
  // same seed gives the same centres at any world size.
  double init_std = 0.01;
  // Sparse AdamW (decoupled weight decay, PyTorch's AdamW formula) on the sampled rows.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.2;  // paper Tab. 9
  // OpenMP threads for the layer's own elementwise work in ForwardBackward (the GEMMs use the
  // BLAS library's threads whatever this is; OptimizerStep uses ATen's setting). 1 keeps that
  // work on the calling thread: OpenMP workers that spin after a parallel region then never
  // compete with OpenBLAS's threads during the GEMMs (several times slower otherwise with
  // the default OMP_WAIT_POLICY; the figures are in bench/RESULTS.md).
  // 0 = ATen's intra-op setting.
  int compute_threads = 1;
  // The implementation (see the top of this file). kHost needs a CPU `device`.
  PartialFcLayer layer = PartialFcLayer::kHost;
  // Where kDevice keeps the shard and computes; with world size > 1 it must be the device of
  // the Collectives' tensors (CUDA with NCCL, CPU with Gloo).
  c10::Device device = c10::Device(c10::kCPU);
  // kDevice only: the three GEMMs in bfloat16 with float32 accumulation (tensor cores; the
  // worker sets it under training.precision bf16). false keeps them float32, exact.
  bool bf16_gemm = false;
};

// Checks ranges (a CPU device for kHost, num_classes >= 1, embedding_dim >= 1, 0 < r <= 1, s > 0, finite margin,
// betas in [0, 1), eps > 0, weight_decay >= 0, compute_threads >= 0); INVALID_ARGUMENT naming
// the field.
Status ValidatePartialFcOptions(const PartialFcOptions& options);

// Per-step statistics, identical on every rank (computed from globally reduced sums).
struct PartialFcStats {
  double loss = 0;                  // L, the global batch mean
  double mean_positive_cosine = 0;  // mean of c_ip over all (i, p ∈ P_i) pairs (paper Fig. 3)
  double mean_negative_cosine = 0;  // mean of c_in over all (i, n ∈ S ∖ P_i) pairs
  int64_t global_batch_size = 0;    // B
  int64_t positive_pairs = 0;
  int64_t negative_pairs = 0;
  int64_t sampled_classes = 0;  // |S| over all shards
};

struct PartialFcStep {
  double loss = 0;  // = stats.loss, the same on every rank
  at::Tensor
      grad_embeddings;  // float32 [B_local, D]: dL/d(local_embeddings) (raw, before normalisation)
  PartialFcStats stats;
  double collective_seconds = 0;  // wall time inside collectives this step (this rank)
  double compute_seconds = 0;     // the rest of ForwardBackward
};

// The shard state for checkpoints, by class range (see Save/Load for the file form).
struct PartialFcShardState {
  ClassRange range;
  int64_t num_classes = 0;
  int64_t embedding_dim = 0;
  int64_t step = 0;       // optimizer steps taken (same on every rank)
  at::Tensor weight;      // float32 [range.size(), D], raw (not normalised) centres
  at::Tensor exp_avg;     // float32 [range.size(), D], AdamW first moment
  at::Tensor exp_avg_sq;  // float32 [range.size(), D], AdamW second moment
  at::Tensor row_steps;   // int64 [range.size()], AdamW steps each row has taken (bias correction)
};

class PartialFc {
 public:
  // Creates this rank's shard (comm->rank() of comm->world_size(); `comm` must outlive the
  // layer) and initialises it from options.seed. INVALID_ARGUMENT for bad options.
  static StatusOr<std::unique_ptr<PartialFc>> Create(const PartialFcOptions& options,
                                                     Collectives* comm);

  ~PartialFc();
  PartialFc(const PartialFc&) = delete;
  PartialFc& operator=(const PartialFc&) = delete;

  // One step's forward and backward over the global batch (a collective: every rank calls it
  // with its own part of the batch; B_local may differ between ranks and may be 0).
  // local_embeddings: float32 [B_local, D]; local_labels: int64/int32 [B_local, l], l the
  // same on every rank, entries in [0, K) or < 0 for padding.
  // INVALID_ARGUMENT (on every rank) for bad shapes, dtypes, labels >= K or a non-finite loss
  // (non-finite embeddings or centres); then no gradient is pending.
  StatusOr<PartialFcStep> ForwardBackward(const at::Tensor& local_embeddings,
                                          const at::Tensor& local_labels);
  // The same with a given sampled set instead of the random draw: S = negatives ∪ all valid
  // labels of the global batch. `negatives`: int64 1-d global class ids in [0, K) (any
  // rank's, duplicates allowed), the same tensor on every rank. Used by `loss-check`.
  StatusOr<PartialFcStep> ForwardBackwardWithNegatives(const at::Tensor& local_embeddings,
                                                       const at::Tensor& local_labels,
                                                       const at::Tensor& negatives);

  // Sparse AdamW over the rows sampled by the last ForwardBackward, then step() += 1.
  // For each sampled row (lazy semantics; rows not sampled are not touched at all: no decay,
  // no moment update, their row step stays):
  //   t = ++row_steps[c]; w *= 1 − lr·wd; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
  //   w −= lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps).
  // FAILED_PRECONDITION when no gradient is pending (no successful ForwardBackward since the
  // last OptimizerStep). Local: no collective.
  // With `apply` (a 0-dim bool tensor, as TrainStep's check of the backbone's gradient gives
  // it) the update applies only where it is true; otherwise the pending gradient is dropped
  // and nothing changes. The device layer masks its update on the device and counts the step
  // there, without reading `apply` (step() reads the count); the host layer reads it.
  Status OptimizerStep(double lr, const at::Tensor& apply = at::Tensor());
  // Drops the pending gradient without updating (e.g. a step skipped for a non-finite
  // backbone loss); step() is unchanged.
  void DiscardGradient();
  bool has_pending_gradient() const;

  // The pending gradient of this shard: global class ids of the sampled rows (int64 [m],
  // sorted) and dL/dw for those raw rows (float32 [m, D]). Undefined tensors when none.
  at::Tensor last_sampled_classes() const;
  at::Tensor last_weight_gradient() const;

  ClassRange class_range() const;
  const PartialFcOptions& options() const;
  int64_t step() const;
  // This shard's raw centres, float32 [range.size(), D] on the layer's device (a view; do
  // not resize).
  at::Tensor weight() const;

  // Checkpoints. ExportState returns views of this shard's state (no copy; on the layer's
  // device). ImportState takes pieces on any device.
  PartialFcShardState ExportState() const;
  // Replaces this shard's state with rows taken from `pieces` (states exported at any world
  // size): their ranges must together cover this shard's range, have this layer's
  // num_classes and embedding_dim, and the same step. INVALID_ARGUMENT otherwise.
  Status ImportState(const std::vector<PartialFcShardState>& pieces);
  // Writes this shard into `dir` (which must exist) as
  //   class_centres.<begin>-<end>.weight.npy       float32 [n, D]
  //   class_centres.<begin>-<end>.exp_avg.npy      float32 [n, D]
  //   class_centres.<begin>-<end>.exp_avg_sq.npy   float32 [n, D]
  //   class_centres.<begin>-<end>.row_steps.npy    int64 [n]
  //   class_centres.<begin>-<end>.json             {"num_classes","embedding_dim","step",
  //                                                 "begin","end", options}, written last
  // (begin/end zero-padded to 12 digits). Every file is written atomically. Each rank writes
  // its own range into the same directory; making the whole checkpoint directory atomic
  // (write to a temp dir, fsync, rename) is the caller's job.
  Status Save(const std::string& dir) const;
  // Reads, from every class_centres.*.json range in `dir` overlapping this shard's range,
  // the overlapping rows (memory-mapped: only those rows are read), so a directory written
  // at world size W loads at any W'. NOT_FOUND when `dir` has no such files;
  // INVALID_ARGUMENT when they do not cover this range, or num_classes / embedding_dim /
  // step disagree; DATA_LOSS for truncated files.
  Status Load(const std::string& dir);

 private:
  struct Impl;
  explicit PartialFc(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlcd::worker
