// `mlcd-worker loss-check`: the loss and gradients of the classification layer or of a
// contrastive loss on given inputs, so other implementations can be compared with ours
// (docs/loss.md, "loss-check").
//
//   mlcd-worker loss-check --embeddings E.npy --weights W.npy --labels Y.npy --negatives N.npy
//       --variant mlcd|mlc|softmax --scale S --margin M --margin-type arc|cos|none --out DIR
//       [--world-size N] [--layer host|device] [--device auto|cpu|cuda[:N]]
//
// E: B x D float32, W: K x D float32, Y: B x l int64 (< 0 = padding), N: int64 1-d class ids.
// The sampled set is S = N ∪ {all valid labels} (no random draw). Writes DIR/loss.npy (0-d),
// DIR/grad_embeddings.npy (B x D), DIR/grad_weights.npy (K x D, zero rows outside S), float32,
// gradients of the batch-mean loss. --world-size N > 1 forks N local ranks that run the
// sharded computation over Gloo on a free loopback port (rank ρ gets samples
// [floor(Bρ/N), floor(B(ρ+1)/N)) and classes ShardClassRange(K, N, ρ)); rank 0 writes DIR.
// --layer picks the implementation (worker/loss/partial_fc.h): host, the fused CPU layer, or
// device, the ATen layer on --device (auto: this rank's CUDA device when there is one, else
// the CPU; ranks on CUDA meet over NCCL, one device per rank).
//
//   mlcd-worker loss-check --embeddings E.npy [--labels Y.npy] --out DIR
//       --variant infonce|mulsupcon|supcon-all|supcon-any [--temperature T] [--views 1|2]
//       [--world-size N]
//
// E: N x D float32 with the views interleaved (rows 2k, 2k+1: image k), Y: N x l int64 per
// row (< 0 = padding; infonce needs none). Writes DIR/loss.npy and DIR/grad_embeddings.npy
// (N x D). With --world-size N rank ρ holds images [floor(Iρ/N), floor(I(ρ+1)/N)) of I = rows /
// views and the batch is gathered (worker/loss/contrastive_loss.h).
//   mlcd-worker loss-check --variant bce|mulcon ... --out DIR
//
// The label heads' losses: worker/loss/label_head_check.h lists their inputs and outputs.
// Exit codes: 0 success, 2 invalid input or usage, 1 any other failure; a rank started by
// hand (--rank) exits 3 when another process holds its rendezvous port (the parent, which
// chose the port, starts its ranks again on another one).
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/even_split.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/npy.h"
#include "worker/command.h"
#include "worker/dist/collectives.h"
#include "worker/dist/local_ranks.h"
#include "worker/loss/contrastive_loss.h"
#include "worker/loss/label_head_check.h"
#include "worker/loss/partial_fc.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

struct LossCheckArgs {
  std::string embeddings, weights, labels, negatives, out;
  std::string variant = "mlcd", margin_type = "arc";
  std::string layer = "host", device = "auto";  // classification variants
  double scale = 32.0;
  double margin = 0.3;
  double temperature = 0.1;        // contrastive variants and mulcon
  std::string tokens, bias, head;  // label heads (bce, mulcon)
  double llcl_weight = 0.1;        // mulcon: γ
  int views = 2;                   // contrastive variants: rows per image
  int world_size = 1;
  double timeout_seconds = 120;
  // Set by the parent for its child ranks only.
  int rank = -1;
  std::string rendezvous;
};

struct LossCheckInputs {
  at::Tensor E, W, Y, N;  // float32 [B, D], float32 [K, D], int64 [B, l], int64 [n]
  PartialFcOptions options;
};

StatusOr<LossCheckInputs> ReadInputs(const LossCheckArgs& a) {
  LossCheckInputs in;
  MLCD_ASSIGN_OR_RETURN(in.E, ReadCheckArray("--embeddings", a.embeddings, true, 2, 2));
  MLCD_ASSIGN_OR_RETURN(in.W, ReadCheckArray("--weights", a.weights, true, 2, 2));
  MLCD_ASSIGN_OR_RETURN(in.Y, ReadCheckArray("--labels", a.labels, false, 1, 2));
  MLCD_ASSIGN_OR_RETURN(in.N, ReadCheckArray("--negatives", a.negatives, false, 1, 1));
  if (in.Y.dim() == 1) in.Y = in.Y.unsqueeze(1);
  const int64_t B = in.E.size(0), D = in.E.size(1), K = in.W.size(0);
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (B < 1 || D < 1)
    return bad("--embeddings " + a.embeddings + ": needs at least one row and one column");
  if (K < 1) return bad("--weights " + a.weights + ": needs at least one class centre (row)");
  if (in.W.size(1) != D) {
    return bad("--weights " + a.weights + " has dimension " + std::to_string(in.W.size(1)) +
               " but --embeddings has " + std::to_string(D));
  }
  if (in.Y.size(0) != B) {
    return bad("--labels " + a.labels + " has " + std::to_string(in.Y.size(0)) +
               " rows but --embeddings has " + std::to_string(B) +
               " (one row of labels per embedding)");
  }
  if (in.Y.size(1) < 1) return bad("--labels " + a.labels + " has no label columns");
  if (!at::isfinite(in.E).all().item<bool>())
    return bad("--embeddings " + a.embeddings + " contains NaN or infinity");
  if (!at::isfinite(in.W).all().item<bool>())
    return bad("--weights " + a.weights + " contains NaN or infinity");
  int64_t max_label = in.Y.max().item<int64_t>();
  if (max_label >= K) {
    at::Tensor where = (in.Y >= K).nonzero();
    return bad("--labels " + a.labels + ": label " + std::to_string(max_label) + " (row " +
               std::to_string(where[0][0].item<int64_t>()) + ") is >= the number of classes " +
               std::to_string(K) + " (rows of --weights); use -1 for padding");
  }
  if (in.N.numel() > 0) {
    int64_t lo = in.N.min().item<int64_t>(), hi = in.N.max().item<int64_t>();
    if (lo < 0 || hi >= K) {
      return bad("--negatives " + a.negatives + ": class id " + std::to_string(lo < 0 ? lo : hi) +
                 " is outside [0, " + std::to_string(K) + ")");
    }
  }
  at::Tensor e_norm = in.E.norm(2, {1});
  if ((e_norm == 0).any().item<bool>()) {
    int64_t row = (e_norm == 0).nonzero()[0][0].item<int64_t>();
    return bad("--embeddings " + a.embeddings + ": row " + std::to_string(row) +
               " is all zeros; embeddings are L2-normalised, so a zero row has no direction");
  }
  at::Tensor in_s = at::zeros({K}, at::kBool);
  at::Tensor valid = in.Y.masked_select(in.Y >= 0);
  if (valid.numel() > 0) in_s.index_fill_(0, valid, true);
  if (in.N.numel() > 0) in_s.index_fill_(0, in.N, true);
  at::Tensor zero_rows = (in.W.norm(2, {1}) == 0).logical_and(in_s);
  if (zero_rows.any().item<bool>()) {
    int64_t row = zero_rows.nonzero()[0][0].item<int64_t>();
    return bad(
        "--weights " + a.weights + ": class centre " + std::to_string(row) +
        " is in the sampled set but all zeros; centres are L2-normalised, so it has no direction");
  }
  PartialFcOptions& o = in.options;
  o.num_classes = K;
  o.embedding_dim = D;
  o.sample_ratio = 1.0;
  MLCD_ASSIGN_OR_RETURN(o.variant, ParseLossVariant(a.variant));
  MLCD_ASSIGN_OR_RETURN(o.margin_type, ParseMarginType(a.margin_type));
  if (!(a.scale > 0) || !std::isfinite(a.scale)) return bad("--scale must be a positive number");
  if (!std::isfinite(a.margin)) return bad("--margin must be a finite number");
  o.scale = a.scale;
  o.margin = a.margin;
  MLCD_ASSIGN_OR_RETURN(o.layer, ParsePartialFcLayer(a.layer));
  if (o.layer == PartialFcLayer::kHost && a.device != "auto" && a.device != "cpu")
    return bad("--device " + a.device + " needs --layer device (the host layer runs on the CPU)");
  MLCD_RETURN_IF_ERROR(ValidatePartialFcOptions(o));
  return in;
}

// One rank's part; rank 0 writes the outputs.
Status ComputeRank(const LossCheckArgs& a, const LossCheckInputs& in, int rank, int world) {
  PartialFcOptions options = in.options;
  if (options.layer == PartialFcLayer::kDevice) {
    MLCD_ASSIGN_OR_RETURN(options.device, ResolveDevice(a.device, rank));
  }
  const at::TensorOptions on_device = at::TensorOptions().device(options.device);
  MLCD_ASSIGN_OR_RETURN(
      std::unique_ptr<Collectives> comm,
      ConnectLocalRank(rank, world, a.rendezvous, a.timeout_seconds, "loss-check", options.device));
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<PartialFc> pfc, PartialFc::Create(options, comm.get()));
  PartialFcShardState all;
  all.range = {0, in.options.num_classes};
  all.num_classes = in.options.num_classes;
  all.embedding_dim = in.options.embedding_dim;
  all.weight = in.W;
  MLCD_RETURN_IF_ERROR(pfc->ImportState({all}));

  const int64_t B = in.E.size(0), D = in.E.size(1), K = in.options.num_classes;
  const int64_t b0 = EvenSplitBegin(B, world, rank), b1 = EvenSplitBegin(B, world, rank + 1);
  MLCD_ASSIGN_OR_RETURN(PartialFcStep step,
                        pfc->ForwardBackwardWithNegatives(in.E.narrow(0, b0, b1 - b0).to(on_device),
                                                          in.Y.narrow(0, b0, b1 - b0), in.N));

  // Embedding gradients, padded to the largest local batch, gathered in rank order.
  int64_t b_max = 0;
  for (int r = 0; r < world; ++r)
    b_max = std::max(b_max, EvenSplitBegin(B, world, r + 1) - EvenSplitBegin(B, world, r));
  at::Tensor mine = at::zeros({b_max, D}, on_device.dtype(at::kFloat));
  mine.narrow(0, 0, b1 - b0).copy_(step.grad_embeddings);
  at::Tensor gathered;
  MLCD_RETURN_IF_ERROR(comm->AllGather(mine, &gathered));
  // Weight gradients: this shard densely (zero outside S), padded to the largest shard.
  const ClassRange range = pfc->class_range();
  int64_t n_max = 0;
  for (int r = 0; r < world; ++r) n_max = std::max(n_max, ShardClassRange(K, world, r).size());
  at::Tensor shard_grad = at::zeros({n_max, D}, on_device.dtype(at::kFloat));
  at::Tensor classes = pfc->last_sampled_classes();
  if (classes.numel() > 0)
    shard_grad.index_copy_(0, classes - range.begin, pfc->last_weight_gradient());
  at::Tensor gathered_w;
  MLCD_RETURN_IF_ERROR(comm->AllGather(shard_grad, &gathered_w));
  if (rank != 0) return Status::Ok();
  gathered = gathered.cpu();
  gathered_w = gathered_w.cpu();

  at::Tensor grad_e = at::empty({B, D}, at::kFloat), grad_w = at::empty({K, D}, at::kFloat);
  for (int r = 0; r < world; ++r) {
    int64_t rb = EvenSplitBegin(B, world, r), rn = EvenSplitBegin(B, world, r + 1) - rb;
    grad_e.narrow(0, rb, rn).copy_(gathered.narrow(0, r * b_max, rn));
    ClassRange cr = ShardClassRange(K, world, r);
    grad_w.narrow(0, cr.begin, cr.size()).copy_(gathered_w.narrow(0, r * n_max, cr.size()));
  }
  MLCD_RETURN_IF_ERROR(MakeDirs(a.out));
  float loss = static_cast<float>(step.loss);
  MLCD_RETURN_IF_ERROR(WriteNpy(a.out + "/loss.npy", NpyDtype::kFloat32, {}, &loss));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(a.out + "/grad_embeddings.npy", NpyDtype::kFloat32, {B, D}, grad_e.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(a.out + "/grad_weights.npy", NpyDtype::kFloat32, {K, D}, grad_w.data_ptr()));
  std::printf(
      "{\"loss\": %.9g, \"world_size\": %d, \"variant\": \"%s\", \"sampled_classes\": %lld, "
      "\"mean_positive_cosine\": %.9g, \"mean_negative_cosine\": %.9g, \"out\": \"%s\"}\n",
      step.loss, world, LossVariantName(in.options.variant),
      static_cast<long long>(step.stats.sampled_classes), step.stats.mean_positive_cosine,
      step.stats.mean_negative_cosine, a.out.c_str());
  std::fflush(stdout);
  return Status::Ok();
}

// A contrastive variant's inputs: the embeddings (views interleaved) and, but for infonce,
// the labels.
struct ContrastiveCheckInputs {
  at::Tensor E, Y;  // float32 [N, D], int64 [N, l] (undefined for infonce without --labels)
  ContrastiveOptions options;
};

StatusOr<ContrastiveCheckInputs> ReadContrastiveInputs(const LossCheckArgs& a) {
  ContrastiveCheckInputs in;
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  MLCD_ASSIGN_OR_RETURN(in.options.variant, ParseContrastiveVariant(a.variant));
  in.options.temperature = a.temperature;
  in.options.views = a.views;
  MLCD_RETURN_IF_ERROR(ValidateContrastiveOptions(in.options).WithContext("--temperature/--views"));
  if (!a.weights.empty() || !a.negatives.empty())
    return bad(
        "--weights and --negatives are for the classification variants (mlcd, mlc, "
        "softmax); variant " +
        a.variant + " compares the batch with itself");
  if (a.layer != "host" || a.device != "auto")
    return bad("--layer and --device are for the classification variants (mlcd, mlc, softmax)");
  MLCD_ASSIGN_OR_RETURN(in.E, ReadCheckArray("--embeddings", a.embeddings, true, 2, 2));
  const int64_t N = in.E.size(0);
  if (N < 2 || in.E.size(1) < 1)
    return bad("--embeddings " + a.embeddings + ": needs at least two rows and one column");
  if (N % a.views != 0)
    return bad("--embeddings " + a.embeddings + " has " + std::to_string(N) + " rows, not a " +
               "multiple of --views " + std::to_string(a.views) +
               " (rows 2k and 2k+1 are the two views of image k)");
  if (!at::isfinite(in.E).all().item<bool>())
    return bad("--embeddings " + a.embeddings + " contains NaN or infinity");
  if ((in.E.norm(2, {1}) == 0).any().item<bool>())
    return bad("--embeddings " + a.embeddings +
               ": a row is all zeros; embeddings are L2-normalised, so it has no direction");
  if (a.labels.empty()) {
    if (in.options.variant != ContrastiveVariant::kInfoNce)
      return bad("--labels is required for variant " + a.variant);
    return in;
  }
  MLCD_ASSIGN_OR_RETURN(in.Y, ReadCheckArray("--labels", a.labels, false, 1, 2));
  if (in.Y.dim() == 1) in.Y = in.Y.unsqueeze(1);
  if (in.Y.size(0) != N)
    return bad("--labels " + a.labels + " has " + std::to_string(in.Y.size(0)) +
               " rows but --embeddings has " + std::to_string(N) + " (one row per view)");
  if (in.Y.size(1) < 1) return bad("--labels " + a.labels + " has no label columns");
  return in;
}

// One rank's part of a contrastive check: the images [floor(I·ρ/W), floor(I·(ρ+1)/W)) of
// I = N / views, all their views; rank 0 writes the loss and the whole batch's gradient.
Status ComputeContrastiveRank(const LossCheckArgs& a, const ContrastiveCheckInputs& in, int rank,
                              int world) {
  MLCD_ASSIGN_OR_RETURN(
      std::unique_ptr<Collectives> comm,
      ConnectLocalRank(rank, world, a.rendezvous, a.timeout_seconds, "loss-check"));
  const int64_t N = in.E.size(0), D = in.E.size(1), views = in.options.views;
  const int64_t images = N / views;
  auto row_begin = [&](int r) { return EvenSplitBegin(images, world, r) * views; };
  const int64_t b0 = row_begin(rank), b1 = row_begin(rank + 1);
  const at::Tensor labels = in.Y.defined() ? in.Y.narrow(0, b0, b1 - b0) : at::Tensor();
  MLCD_ASSIGN_OR_RETURN(
      ContrastiveStep step,
      ContrastiveForwardBackward(in.options, *comm, in.E.narrow(0, b0, b1 - b0), labels));
  int64_t rows_max = 0;
  for (int r = 0; r < world; ++r) rows_max = std::max(rows_max, row_begin(r + 1) - row_begin(r));
  at::Tensor mine = at::zeros({rows_max, D}, at::kFloat);
  mine.narrow(0, 0, b1 - b0).copy_(step.grad_embeddings);
  at::Tensor gathered;
  MLCD_RETURN_IF_ERROR(comm->AllGather(mine, &gathered));
  if (rank != 0) return Status::Ok();
  at::Tensor grad_e = at::empty({N, D}, at::kFloat);
  for (int r = 0; r < world; ++r) {
    const int64_t rb = row_begin(r), rn = row_begin(r + 1) - rb;
    grad_e.narrow(0, rb, rn).copy_(gathered.narrow(0, r * rows_max, rn));
  }
  MLCD_RETURN_IF_ERROR(MakeDirs(a.out));
  float loss = static_cast<float>(step.loss);
  MLCD_RETURN_IF_ERROR(WriteNpy(a.out + "/loss.npy", NpyDtype::kFloat32, {}, &loss));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(a.out + "/grad_embeddings.npy", NpyDtype::kFloat32, {N, D}, grad_e.data_ptr()));
  std::printf(
      "{\"loss\": %.9g, \"world_size\": %d, \"variant\": \"%s\", \"temperature\": %.9g, "
      "\"anchors_with_positives\": %lld, \"mean_positives\": %.9g, \"out\": \"%s\"}\n",
      step.loss, world, ContrastiveVariantName(in.options.variant), in.options.temperature,
      static_cast<long long>(step.stats.anchors_with_positives), step.stats.mean_positives,
      a.out.c_str());
  std::fflush(stdout);
  return Status::Ok();
}

std::vector<std::string> ChildArgs(const LossCheckArgs& a, int rank,
                                   const std::string& rendezvous) {
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  std::vector<std::string> args = {"mlcd-worker", "loss-check", "--variant",
                                   a.variant,     "--out",      a.out};
  auto add = [&args](const std::string& flag, const std::string& value) {
    if (value.empty()) return;
    args.push_back(flag);
    args.push_back(value);
  };
  add("--embeddings", a.embeddings);
  add("--weights", a.weights);
  add("--labels", a.labels);
  add("--negatives", a.negatives);
  add("--scale", num(a.scale));
  add("--margin", num(a.margin));
  add("--margin-type", a.margin_type);
  add("--layer", a.layer);
  add("--device", a.device);
  add("--temperature", num(a.temperature));
  add("--tokens", a.tokens);
  add("--bias", a.bias);
  add("--head", a.head);
  add("--llcl-weight", num(a.llcl_weight));
  add("--views", std::to_string(a.views));
  add("--world-size", std::to_string(a.world_size));
  add("--timeout", num(a.timeout_seconds));
  add("--rank", std::to_string(rank));
  add("--rendezvous", rendezvous);
  return args;
}

// The label heads' check (worker/loss/label_head_check.h), after RunLossCheck's flag checks.
int RunLabelHeadCheck(const LossCheckArgs& a) {
  LabelHeadCheckRequest q;
  q.variant = *ParseLabelHeadVariant(a.variant);
  q.embeddings = a.embeddings;
  q.tokens = a.tokens;
  q.labels = a.labels;
  q.weights = a.weights;
  q.bias = a.bias;
  q.head = a.head;
  q.out = a.out;
  q.temperature = a.temperature;
  q.llcl_weight = a.llcl_weight;
  StatusOr<LabelHeadCheckInputs> inputs = ReadLabelHeadCheckInputs(q);
  if (!inputs.ok() || !a.negatives.empty() || a.layer != "host" || a.device != "auto") {
    std::cerr << "loss-check: "
              << (inputs.ok() ? "--negatives, --layer and --device are for the classification "
                                "variants (mlcd, mlc, softmax)"
                              : inputs.status().ToString())
              << "\n";
    return 2;
  }
  if (a.world_size > 1 && a.rank < 0) {
    return RunLocalRanks("loss-check", a.world_size, [&a](int rank, const std::string& rdv) {
      return ChildArgs(a, rank, rdv);
    });
  }
  const int rank = std::max(a.rank, 0);
  Status s = [&]() -> Status {
    MLCD_ASSIGN_OR_RETURN(
        std::unique_ptr<Collectives> comm,
        ConnectLocalRank(rank, a.world_size, a.rendezvous, a.timeout_seconds, "loss-check"));
    return RunLabelHeadCheckRank(q, *inputs, *comm);
  }();
  return FinishLocalRank(
      "loss-check" + (a.rank >= 0 ? " rank " + std::to_string(a.rank) : std::string()), s);
}

int RunLossCheck(const LossCheckArgs& a) {
  SetLogComponent(a.rank >= 0 ? "loss-check r" + std::to_string(a.rank) : "loss-check");
  if (a.world_size < 1 || a.world_size > 64) {
    std::cerr << "loss-check: --world-size must be in [1, 64], got " << a.world_size << "\n";
    return 2;
  }
  if (!(a.timeout_seconds > 0)) {
    std::cerr << "loss-check: --timeout must be positive\n";
    return 2;
  }
  if (a.out.empty()) {
    std::cerr << "loss-check: --out DIR is required\n";
    return 2;
  }
  if (a.rank >= 0 && (a.rank >= a.world_size || a.rendezvous.empty())) {
    std::cerr << "loss-check: --rank needs --rendezvous and must be < --world-size\n";
    return 2;
  }
  StatusOr<LossFamily> family = LossFamilyOf(a.variant);
  if (!family.ok()) {
    std::cerr << "loss-check: --variant: " << family.status().ToString() << "\n";
    return 2;
  }
  if (*family == LossFamily::kLabelHead) return RunLabelHeadCheck(a);
  const bool contrastive = *family == LossFamily::kContrastive;
  StatusOr<LossCheckInputs> inputs = LossCheckInputs{};
  StatusOr<ContrastiveCheckInputs> contrastive_inputs = ContrastiveCheckInputs{};
  if (contrastive) {
    contrastive_inputs = ReadContrastiveInputs(a);
  } else {
    inputs = ReadInputs(a);
  }
  const Status read = contrastive ? contrastive_inputs.status() : inputs.status();
  if (!read.ok()) {
    std::cerr << "loss-check: " << read.ToString() << "\n";
    return 2;
  }
  if (a.world_size > 1 && a.rank < 0) {
    return RunLocalRanks("loss-check", a.world_size, [&a](int rank, const std::string& rdv) {
      return ChildArgs(a, rank, rdv);
    });
  }
  const int rank = std::max(a.rank, 0);
  Status s = contrastive ? ComputeContrastiveRank(a, *contrastive_inputs, rank, a.world_size)
                         : ComputeRank(a, *inputs, rank, a.world_size);
  return FinishLocalRank(
      "loss-check" + (a.rank >= 0 ? " rank " + std::to_string(a.rank) : std::string()), s);
}

static CommandRegistration registration(20, [](CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LossCheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "loss-check",
      "Loss and gradients on given inputs, for comparing implementations. The classification "
      "layer\n(mlcd, mlc, softmax; S = negatives ∪ positives, no random sampling) writes "
      "DIR/loss.npy,\nDIR/grad_embeddings.npy, DIR/grad_weights.npy; the contrastive losses "
      "(infonce, mulsupcon,\nsupcon-all, supcon-any; docs/loss.md) DIR/loss.npy and "
      "DIR/grad_embeddings.npy (float32;\ngradients of the batch-mean loss); the label heads "
      "(bce, mulcon) their loss and gradients\n(docs/loss.md, \"Label heads\").");
  cmd->add_option("--embeddings", args->embeddings,
                  "B x D float32 .npy of embeddings (normalised inside; bce: as given); "
                  "mulcon: B x L x d_z projected label-level embeddings");
  cmd->add_option("--tokens", args->tokens,
                  "mulcon: B x P x C float32 .npy of patch tokens (with --head)");
  cmd->add_option("--head", args->head,
                  "mulcon: .safetensors of the head's mulcon_head.* tensors (docs/export.md)");
  cmd->add_option("--bias", args->bias, "bce: K float32 .npy of the head's bias (default 0)");
  cmd->add_option("--llcl-weight", args->llcl_weight,
                  "mulcon with --head: γ in L = BCE + γ·LLCL (0 = BCE alone)")
      ->capture_default_str();
  cmd->add_option(
      "--weights", args->weights,
      "classification: K x D float32 .npy of class centres (normalised inside); bce: the "
      "head's K x D weights");
  cmd->add_option("--labels", args->labels,
                  "B x l int64 .npy of labels (classification: positive class ids), -1 (any "
                  "negative) = padding; not needed by infonce");
  cmd->add_option("--negatives", args->negatives,
                  "classification: 1-d int64 .npy of negative class ids; S = these ∪ all labels");
  cmd->add_option(
         "--variant", args->variant,
         "mlcd | mlc | softmax | infonce | mulsupcon | supcon-all | supcon-any | bce | mulcon")
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "contrastive and mulcon: temperature τ")
      ->capture_default_str();
  cmd->add_option("--views", args->views,
                  "contrastive: rows per image (2: rows 2k and 2k+1 are image k's two views)")
      ->capture_default_str();
  cmd->add_option("--scale", args->scale, "logit scale s")->capture_default_str();
  cmd->add_option("--margin", args->margin, "margin m on positive logits")->capture_default_str();
  cmd->add_option("--margin-type", args->margin_type, "arc: s·cos(θ+m) | cos: s·(cosθ−m) | none")
      ->capture_default_str();
  cmd->add_option("--layer", args->layer,
                  "classification: host (the fused CPU layer) | device (ATen ops on --device)")
      ->capture_default_str();
  cmd->add_option("--device", args->device,
                  "classification with --layer device: auto (this rank's CUDA device when there "
                  "is one) | cpu | cuda | cuda:N")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "output directory (created)")->required();
  cmd->add_option(
         "--world-size", args->world_size,
         "shard over N local processes (Gloo on a free loopback port); outputs must not change")
      ->capture_default_str();
  AddLocalRankOptions(cmd, &args->timeout_seconds, &args->rank, &args->rendezvous);
  cmd->callback([args, exit_code] { *exit_code = RunLossCheck(*args); });
});

}  // namespace
}  // namespace mlcd::worker
