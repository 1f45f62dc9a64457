#include "worker/train/grad_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace mlcd::worker {

namespace {

using torch::autograd::variable_list;

}  // namespace

// The buckets in their fixed launch order, what each still waits for, and the pending
// collectives. Touched by the backward's hooks (on the thread running the backward, while the
// caller waits in backward()) and by the caller before and after it, never at the same time.
struct GradSync::Buckets {
  Collectives* comm = nullptr;
  std::vector<torch::Tensor> slices;       // by launch position
  std::vector<std::vector<int>> of_param;  // launch positions each parameter is part of
  std::vector<int> members;                // parameters per bucket, by launch position
  std::vector<int> missing;                // of those, not yet written this backward
  std::vector<PendingCollective> pending;  // by launch position
  int next = 0;                            // launch position of the next bucket to start
  bool armed = false;
  int started_in_backward = 0;
  // Keeps each parameter's AccumulateGrad node, and with it the hook, alive.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;

  void Arm() {
    missing = members;
    pending.clear();
    pending.resize(slices.size());
    next = 0;
    armed = true;
    started_in_backward = 0;
  }
  // Starts the complete buckets at the head of the order.
  void StartReady() {
    while (next < static_cast<int>(slices.size()) && missing[static_cast<size_t>(next)] == 0) {
      pending[static_cast<size_t>(next)] = comm->AllReduceAsync(slices[static_cast<size_t>(next)]);
      ++next;
      if (armed) ++started_in_backward;
    }
  }
  void ParameterWritten(size_t param) {
    if (!armed) return;
    for (int b : of_param[param]) --missing[static_cast<size_t>(b)];
    StartReady();
  }
};

namespace {

// Runs after the AccumulateGrad node of one parameter: its gradient is in the flat buffer.
class GradientWrittenHook : public torch::autograd::FunctionPostHook {
 public:
  GradientWrittenHook(std::weak_ptr<GradSync::Buckets> buckets, size_t param)
      : buckets_(std::move(buckets)), param_(param) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    if (auto buckets = buckets_.lock()) buckets->ParameterWritten(param_);
    return outputs;
  }

 private:
  std::weak_ptr<GradSync::Buckets> buckets_;
  size_t param_;
};

}  // namespace

GradSync::GradSync(Collectives* comm, FlatParameters* params, GradSyncOptions options)
    : comm_(comm), params_(params), options_(std::move(options)) {
  options_.bucket_bytes = std::max<int64_t>(4096, options_.bucket_bytes);
  buckets_ = std::make_shared<Buckets>();
  buckets_->comm = comm_;
  const int64_t per = options_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  const int64_t n = params_->numel();
  const int count = num_buckets();
  const size_t num_params = params_->parameters().size();
  std::vector<int64_t> position = options_.forward_position;
  if (position.size() != num_params) {
    position.resize(num_params);
    for (size_t i = 0; i < num_params; ++i) position[i] = static_cast<int64_t>(i);
  }
  // Each bucket's earliest forward position; launch order: latest first (ties by index).
  std::vector<int64_t> earliest(static_cast<size_t>(count), INT64_MAX);
  std::vector<std::vector<int>> by_index(num_params);
  for (size_t i = 0; i < num_params; ++i) {
    const int64_t begin = params_->parameter_offset(i);
    const int64_t end = begin + params_->parameters()[i].numel();
    if (end <= begin) continue;
    for (int64_t b = begin / per; b <= (end - 1) / per; ++b) {
      by_index[i].push_back(static_cast<int>(b));
      earliest[static_cast<size_t>(b)] = std::min(earliest[static_cast<size_t>(b)], position[i]);
    }
  }
  std::vector<int> order(static_cast<size_t>(count));
  for (int b = 0; b < count; ++b) order[static_cast<size_t>(b)] = b;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return earliest[static_cast<size_t>(a)] > earliest[static_cast<size_t>(b)];
  });
  std::vector<int> launch_position(static_cast<size_t>(count));
  Buckets& bk = *buckets_;
  for (int k = 0; k < count; ++k) {
    const int b = order[static_cast<size_t>(k)];
    launch_position[static_cast<size_t>(b)] = k;
    bk.slices.push_back(params_->grads().slice(0, b * per, std::min(n, (b + 1) * per)));
  }
  bk.members.assign(static_cast<size_t>(count), 0);
  bk.of_param.resize(num_params);
  for (size_t i = 0; i < num_params; ++i) {
    for (int b : by_index[i]) {
      const int k = launch_position[static_cast<size_t>(b)];
      bk.of_param[i].push_back(k);
      ++bk.members[static_cast<size_t>(k)];
    }
  }
  if (!options_.overlap || comm_->world_size() <= 1) return;
  for (size_t i = 0; i < num_params; ++i) {
    const torch::Tensor& p = params_->parameters()[i];
    if (!p.requires_grad()) continue;
    std::shared_ptr<torch::autograd::Node> node = torch::autograd::impl::grad_accumulator(p);
    if (!node) continue;
    node->add_post_hook(std::make_unique<GradientWrittenHook>(buckets_, i));
    bk.accumulators.push_back(std::move(node));
  }
}

GradSync::~GradSync() = default;

std::vector<int64_t> ForwardPositions(const torch::nn::Module& model, const FlatParameters& flat) {
  const std::vector<torch::Tensor> in_forward = model.parameters();
  std::vector<int64_t> positions;
  for (const torch::Tensor& p : flat.parameters()) {
    int64_t found = static_cast<int64_t>(in_forward.size());
    for (size_t k = 0; k < in_forward.size(); ++k) {
      if (in_forward[k].unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) {
        found = static_cast<int64_t>(k);
        break;
      }
    }
    positions.push_back(found);
  }
  return positions;
}

int GradSync::num_buckets() const {
  const int64_t per = options_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  return static_cast<int>((params_->numel() + per - 1) / per);
}

void GradSync::BeginBackward() {
  if (comm_->world_size() <= 1 || buckets_->accumulators.empty()) return;
  buckets_->Arm();
}

int GradSync::started_during_backward() const { return buckets_->started_in_backward; }

Status GradSync::AllReduceGradients() {
  last_seconds_ = 0;
  if (comm_->world_size() <= 1) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  Buckets& bk = *buckets_;
  if (!bk.armed) bk.Arm();  // no backward was armed: nothing started yet
  bk.armed = false;
  // What the backward did not start (a parameter it did not reach, or no overlap), in order.
  std::fill(bk.missing.begin(), bk.missing.end(), 0);
  bk.StartReady();
  Status first = Status::Ok();
  for (PendingCollective& work : bk.pending) {
    Status st = work.Wait();
    if (first.ok() && !st.ok()) first = st;
  }
  if (!first.ok()) return first.WithContext("allreduce of backbone gradients");
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

Status GradSync::BroadcastParameters() {
  if (comm_->world_size() <= 1) return Status::Ok();
  std::vector<at::Tensor> tensors{params_->values()};
  Status st = comm_->Broadcast(tensors, 0);
  if (!st.ok()) return st.WithContext("broadcast of the initial backbone weights from rank 0");
  if (tensors[0].data_ptr() != params_->values().data_ptr()) {
    torch::NoGradGuard no_grad;
    params_->values().copy_(tensors[0]);
  }
  return Status::Ok();
}

Status GradSync::CheckParametersInSync() {
  if (comm_->world_size() <= 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  // Sum and max of a fingerprint: equal on every rank iff max - min == 0 for each entry.
  const torch::Tensor& v = params_->values();
  torch::Tensor fp = torch::stack(
      {v.sum().to(torch::kDouble), v.abs().sum().to(torch::kDouble),
       (v * torch::arange(v.numel(), v.options()).remainder(97)).sum().to(torch::kDouble)});
  torch::Tensor mx = fp.clone(), mn = fp.clone();
  MLCD_RETURN_IF_ERROR(comm_->AllReduce(mx, ReduceOp::kMax));
  MLCD_RETURN_IF_ERROR(comm_->AllReduce(mn, ReduceOp::kMin));
  if (!torch::equal(mx, mn)) {
    return Status::FailedPrecondition("backbone weights differ between ranks (fingerprints " +
                                      std::to_string(mn[0].item<double>()) + " vs " +
                                      std::to_string(mx[0].item<double>()) + ")");
  }
  return Status::Ok();
}

}  // namespace mlcd::worker
