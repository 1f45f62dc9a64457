#include "worker/loss/partial_fc.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "common/even_split.h"
#include "common/random.h"
#include "worker/loss/partial_fc_impl.h"
#include "worker/loss/partial_fc_state.h"
#include "worker/loss/sparse_adamw.h"

namespace mlcd::worker {

namespace {

// Row `cls` of the initial centres: N(0, std²) entries from a hash of (seed, class id, dim).
void FillInitialRow(uint64_t seed, int64_t cls, double std_dev, float* out, int64_t dim) {
  const uint64_t row_key =
      SplitMix64(SplitMix64(seed ^ 0x6D6C6364ull) ^ static_cast<uint64_t>(cls));
  const double two_pi = 2.0 * M_PI;
  for (int64_t j = 0; j < dim; j += 2) {
    uint64_t h = SplitMix64(row_key + static_cast<uint64_t>(j));
    double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1p-32;  // (0, 1)
    double u2 = static_cast<double>(h & 0xffffffffull) * 0x1p-32;
    double radius = std::sqrt(-2.0 * std::log(u1)) * std_dev;
    out[j] = static_cast<float>(radius * std::cos(two_pi * u2));
    if (j + 1 < dim) out[j + 1] = static_cast<float>(radius * std::sin(two_pi * u2));
  }
}

}  // namespace

StatusOr<PartialFcLayer> ParsePartialFcLayer(const std::string& name) {
  if (name == "host") return PartialFcLayer::kHost;
  if (name == "device") return PartialFcLayer::kDevice;
  return Status::InvalidArgument("unknown classification layer '" + name +
                                 "'; expected host (the fused CPU layer) or device (ATen ops on "
                                 "the worker's device)");
}

const char* PartialFcLayerName(PartialFcLayer layer) {
  return layer == PartialFcLayer::kDevice ? "device" : "host";
}

ClassRange ShardClassRange(int64_t num_classes, int world_size, int rank) {
  ClassRange r;
  r.begin = EvenSplitBegin(num_classes, world_size, rank);
  r.end = EvenSplitBegin(num_classes, world_size, rank + 1);
  return r;
}

Status ValidatePartialFcOptions(const PartialFcOptions& o) {
  auto bad = [](const std::string& m) {
    return Status::InvalidArgument("PartialFc options: " + m);
  };
  if (o.layer == PartialFcLayer::kHost && !o.device.is_cpu()) {
    return bad("the host layer keeps its shard in host memory; device " + o.device.str() +
               " needs layer device");
  }
  if (!o.device.is_cpu() && !o.device.is_cuda())
    return bad("device must be cpu or cuda, got " + o.device.str());
  if (o.num_classes < 1)
    return bad("num_classes must be >= 1, got " + std::to_string(o.num_classes));
  if (o.embedding_dim < 1)
    return bad("embedding_dim must be >= 1, got " + std::to_string(o.embedding_dim));
  if (!(o.sample_ratio > 0.0 && o.sample_ratio <= 1.0)) {
    return bad("sample_ratio must be in (0, 1], got " + std::to_string(o.sample_ratio));
  }
  if (!(o.scale > 0.0) || !std::isfinite(o.scale))
    return bad("scale must be a positive number, got " + std::to_string(o.scale));
  if (!std::isfinite(o.margin)) return bad("margin must be finite");
  if (!(o.init_std > 0.0) || !std::isfinite(o.init_std)) return bad("init_std must be positive");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0))
    return bad("beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return bad("beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  if (!(o.eps > 0.0)) return bad("eps must be > 0, got " + std::to_string(o.eps));
  if (o.compute_threads < 0)
    return bad("compute_threads must be >= 0, got " + std::to_string(o.compute_threads));
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    return bad("weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  }
  return Status::Ok();
}

PartialFc::PartialFc(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PartialFc::~PartialFc() = default;

StatusOr<std::unique_ptr<PartialFc>> PartialFc::Create(const PartialFcOptions& options,
                                                       Collectives* comm) {
  MLCD_RETURN_IF_ERROR(ValidatePartialFcOptions(options));
  if (comm == nullptr)
    return Status::InvalidArgument(
        "PartialFc needs a Collectives (Collectives::Local() for one process)");
  if (options.layer == PartialFcLayer::kDevice && comm->world_size() > 1 &&
      comm->device().type() != options.device.type()) {
    return Status::InvalidArgument(
        "the device layer on " + options.device.str() + " needs collectives that move " +
        options.device.str() + " tensors, but the given group is " + comm->backend_name() + " on " +
        comm->device().str() + " (use the gang's group on the layer's device)");
  }
  if (options.device.is_cuda() && !at::hasCUDA()) {
    return Status::InvalidArgument("the layer's device is " + options.device.str() +
                                   " but this build or machine has no CUDA; use the cpu device");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->comm = comm;
  impl->dim = options.embedding_dim;
  impl->range = ShardClassRange(options.num_classes, comm->world_size(), comm->rank());
  const int64_t n = impl->range.size(), dim = impl->dim;
  if (n > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument("a shard of " + std::to_string(n) +
                                   " classes is too large; use more ranks");
  }
  impl->weight = at::empty({n, dim}, at::kFloat);
  float* w = impl->weight.data_ptr<float>();
  const int64_t begin = impl->range.begin;
  at::parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      FillInitialRow(options.seed, begin + r, options.init_std, w + r * dim, dim);
  });
  const at::TensorOptions on_device = at::TensorOptions().device(options.device);
  impl->weight = impl->weight.to(on_device);
  impl->exp_avg = at::zeros({n, dim}, on_device.dtype(at::kFloat));
  impl->exp_avg_sq = at::zeros({n, dim}, on_device.dtype(at::kFloat));
  impl->row_steps = at::zeros({n}, on_device.dtype(at::kLong));
  impl->position.assign(static_cast<size_t>(n), -1);
  return std::unique_ptr<PartialFc>(new PartialFc(std::move(impl)));
}

StatusOr<PartialFcStep> PartialFc::ForwardBackward(const at::Tensor& local_embeddings,
                                                   const at::Tensor& local_labels) {
  if (impl_->options.layer == PartialFcLayer::kDevice)
    return impl_->DeviceStep(local_embeddings, local_labels, nullptr);
  return impl_->Step(local_embeddings, local_labels, nullptr);
}

StatusOr<PartialFcStep> PartialFc::ForwardBackwardWithNegatives(const at::Tensor& local_embeddings,
                                                                const at::Tensor& local_labels,
                                                                const at::Tensor& negatives) {
  if (impl_->options.layer == PartialFcLayer::kDevice)
    return impl_->DeviceStep(local_embeddings, local_labels, &negatives);
  return impl_->Step(local_embeddings, local_labels, &negatives);
}

Status PartialFc::OptimizerStep(double lr, const at::Tensor& apply) {
  Impl& im = *impl_;
  if (!im.pending) {
    return Status::FailedPrecondition(
        "PartialFc::OptimizerStep without a pending gradient: call ForwardBackward first (each "
        "gradient is applied once)");
  }
  if (!(lr >= 0.0) || !std::isfinite(lr))
    return Status::InvalidArgument("learning rate must be finite and >= 0");
  const PartialFcOptions& o = im.options;
  SparseAdamWState state{im.weight, im.exp_avg, im.exp_avg_sq, im.row_steps};
  const SparseAdamWOptions adamw{o.beta1, o.beta2, o.eps, o.weight_decay};
  // The device layer masks its update on the device and counts the step there (no read of
  // `apply`); the host layer reads it.
  const bool masked = o.layer == PartialFcLayer::kDevice && apply.defined();
  if (apply.defined() && !masked && !apply.item<bool>()) {
    DiscardGradient();
    return Status::Ok();
  }
  if (o.layer == PartialFcLayer::kDevice) {
    const at::Tensor mask = masked ? apply.to(im.weight.device()) : at::Tensor();
    SparseAdamWUpdateTensors(adamw, lr, im.pending_rows, im.pending_grad, &state, mask);
  } else {
    SparseAdamWUpdate(adamw, lr, im.pending_rows, im.pending_grad, &state);
  }
  if (masked) {
    const at::Tensor applied = apply.to(im.weight.device(), at::kLong);
    im.unsettled_steps =
        im.unsettled_steps.defined() ? im.unsettled_steps.add_(applied) : applied.clone();
  } else {
    im.step += 1;
  }
  DiscardGradient();
  return Status::Ok();
}

int64_t PartialFc::Impl::Steps() const {
  return step + (unsettled_steps.defined() ? unsettled_steps.item<int64_t>() : 0);
}

void PartialFc::DiscardGradient() {
  impl_->pending = false;
  impl_->pending_rows = at::Tensor();
  impl_->pending_grad = at::Tensor();
}

bool PartialFc::has_pending_gradient() const { return impl_->pending; }

at::Tensor PartialFc::last_sampled_classes() const {
  if (!impl_->pending) return at::Tensor();
  return impl_->pending_rows + impl_->range.begin;
}

at::Tensor PartialFc::last_weight_gradient() const {
  return impl_->pending ? impl_->pending_grad : at::Tensor();
}

ClassRange PartialFc::class_range() const { return impl_->range; }
const PartialFcOptions& PartialFc::options() const { return impl_->options; }
int64_t PartialFc::step() const { return impl_->Steps(); }
at::Tensor PartialFc::weight() const { return impl_->weight; }

PartialFcShardState PartialFc::ExportState() const {
  PartialFcShardState st;
  st.range = impl_->range;
  st.num_classes = impl_->options.num_classes;
  st.embedding_dim = impl_->dim;
  st.step = impl_->Steps();
  st.weight = impl_->weight;
  st.exp_avg = impl_->exp_avg;
  st.exp_avg_sq = impl_->exp_avg_sq;
  st.row_steps = impl_->row_steps;
  return st;
}

Status PartialFc::ImportState(const std::vector<PartialFcShardState>& pieces) {
  PartialFcShardState shard = ExportState();  // views: written in place
  MLCD_RETURN_IF_ERROR(AssembleShardState(pieces, &shard));
  impl_->step = shard.step;
  impl_->unsettled_steps = at::Tensor();
  DiscardGradient();
  return Status::Ok();
}

Status PartialFc::Save(const std::string& dir) const {
  // The files are written from host memory (cpu() of a host tensor is the tensor itself).
  PartialFcShardState state = ExportState();
  for (at::Tensor* t : {&state.weight, &state.exp_avg, &state.exp_avg_sq, &state.row_steps})
    *t = t->cpu();
  return SaveShardState(dir, state, impl_->options);
}

Status PartialFc::Load(const std::string& dir) {
  Impl& im = *impl_;
  MLCD_ASSIGN_OR_RETURN(ShardPieces read,
                        ReadShardPieces(dir, im.range, im.options.num_classes, im.dim));
  Status s = ImportState(read.pieces);
  if (!s.ok()) return s.WithContext("loading class centres from '" + dir + "'");
  im.step = read.step;  // also for a shard that owns no class (no piece overlaps it)
  im.unsettled_steps = at::Tensor();
  return s;
}

}  // namespace mlcd::worker
