#include "worker/dist/collectives.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef MLCD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <utility>

#include "common/log.h"
#include "common/net.h"
#include "worker/torch_compat.h"

namespace mlcd::worker {

struct Collectives::Group {
  c10::intrusive_ptr<::c10d::Store> store;
  compat::C10dGroupPtr pg;  // Gloo or NCCL (worker/torch_compat.h)
  bool nccl = false;
};

namespace {

::c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ::c10d::ReduceOp(::c10d::ReduceOp::SUM);
    case ReduceOp::kMax:
      return ::c10d::ReduceOp(::c10d::ReduceOp::MAX);
    case ReduceOp::kMin:
      return ::c10d::ReduceOp(::c10d::ReduceOp::MIN);
  }
  return ::c10d::ReduceOp(::c10d::ReduceOp::SUM);
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool LooksLikeTimeout(const std::string& message) {
  for (const char* needle : {"Timed out", "timed out", "Timeout", "timeout", "Socket Timeout"}) {
    if (message.find(needle) != std::string::npos) return true;
  }
  return false;
}

Status ClassifyError(const std::string& what, const std::string& message) {
  std::string text = what + " failed: " + message;
  if (LooksLikeTimeout(message)) {
    return Status::DeadlineExceeded(text +
                                    " (a peer did not answer within the collective timeout; is "
                                    "every rank alive and running the same step?)");
  }
  // libtorch 1.x says "Address already in use", 2.x "EADDRINUSE ... address already in use".
  if (message.find("EADDRINUSE") != std::string::npos ||
      message.find("Address already in use") != std::string::npos ||
      message.find("address already in use") != std::string::npos) {
    return Status::AlreadyExists(text +
                                 " (another process listens on this port; give the gang a "
                                 "free rendezvous port)");
  }
  if (message.find("Duplicate GPU") != std::string::npos) {
    return Status::FailedPrecondition(
        text +
        " (NCCL needs one GPU per rank: give each rank its own device, e.g. "
        "--device cuda:N, or train this gang on the CPU with Gloo)");
  }
  return Status::Unavailable(text + " (a peer process died or the connection broke)");
}

// How rank 0's failure to serve the store begins its role text; IsRendezvousPortTaken
// recognises the bind failure by it.
constexpr char kServingStore[] = "serving the rendezvous store on port ";

// Runs `body`, turning c10d/Gloo exceptions into a message.
bool CatchAll(const std::function<void()>& body, std::string* message) {
  try {
    body();
    return true;
  } catch (const c10::Error& e) {
    *message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    *message = e.what();
  }
  return false;
}

std::string DescribeTensor(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

// The rendezvous store: rank 0 serves, the others connect (retrying until the timeout).
Status ConnectStore(const CollectivesOptions& options, const std::string& host, int port,
                    c10::intrusive_ptr<::c10d::Store>* store) {
  std::string message;
  bool ok = CatchAll(
      [&] {
        ::c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<uint16_t>(port);
        store_options.isServer = options.rank == 0;
        store_options.numWorkers = static_cast<size_t>(options.world_size);
        store_options.waitWorkers = false;
        store_options.timeout = options.timeout;
        // Several groups of one process (e.g. NCCL for the backbone and Gloo for the class
        // centres) may share the rendezvous port; their keys differ by store_prefix.
        store_options.multiTenant = true;
        auto tcp = c10::make_intrusive<::c10d::TCPStore>(host, store_options);
        *store = c10::make_intrusive<::c10d::PrefixStore>(options.store_prefix, tcp);
      },
      &message);
  if (!ok) {
    std::string role = options.rank == 0
                           ? kServingStore + std::to_string(port)
                           : "connecting to the rendezvous store at " + options.rendezvous;
    Status s = ClassifyError("rank " + std::to_string(options.rank) + " " + role, message);
    return Status(s.code(),
                  s.message() + "; check that rank 0 runs and that the port is free and reachable");
  }

  return Status::Ok();
}

// This rank's process group over the store: NCCL, or Gloo on the device the options, the
// environment (GLOO_SOCKET_IFNAME) or a loopback rendezvous name.
Status JoinProcessGroup(const CollectivesOptions& options, const std::string& host, bool use_nccl,
                        const c10::intrusive_ptr<::c10d::Store>& store, compat::C10dGroupPtr* pg,
                        bool* nccl) {
  (void)nccl;  // set only in a build with NCCL
  std::string message;
  bool ok = CatchAll(
      [&] {
#ifdef MLCD_WITH_NCCL
        if (use_nccl) {
          auto nccl_options = ::c10d::ProcessGroupNCCL::Options::create();
          nccl_options->timeout = options.timeout;
          *pg = c10::make_intrusive<::c10d::ProcessGroupNCCL>(store, options.rank,
                                                              options.world_size, nccl_options);
          *nccl = true;
          return;
        }
#endif
        auto gloo_options = ::c10d::ProcessGroupGloo::Options::create(options.timeout);
        const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
        if (!options.gloo_hostname.empty()) {
          gloo_options->devices.push_back(
              ::c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
        } else if (ifname != nullptr && *ifname != '\0') {
          gloo_options->devices.push_back(
              ::c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        } else if (IsLoopbackHost(host)) {
          gloo_options->devices.push_back(
              ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        } else {
          gloo_options->devices.push_back(::c10d::ProcessGroupGloo::createDefaultDevice());
        }
        *pg = c10::make_intrusive<::c10d::ProcessGroupGloo>(store, options.rank, options.world_size,
                                                            gloo_options);
      },
      &message);
  if (!ok) {
    return ClassifyError("rank " + std::to_string(options.rank) + " joining the " +
                             (use_nccl ? "NCCL" : "Gloo") + " process group of " +
                             std::to_string(options.world_size) + " ranks at " + options.rendezvous,
                         message);
  }
  return Status::Ok();
}

}  // namespace

void SetNcclEnvironmentDefaults() {
  // Blocking wait makes wait() honour the timeout and throw instead of hanging.
  ::setenv(compat::kNcclBlockingWaitEnv, "1", 0);
  ::setenv(compat::kNcclAsyncErrorHandlingEnv, "1", 0);
}

Collectives::~Collectives() = default;

std::unique_ptr<Collectives> Collectives::Local(c10::Device device) {
  std::unique_ptr<Collectives> c(new Collectives());
  c->rank_ = 0;
  c->world_size_ = 1;
  c->device_ = device;
  return c;
}

bool IsRendezvousPortTaken(const Status& status) {
  return status.code() == StatusCode::kAlreadyExists &&
         status.message().find(kServingStore) != std::string::npos;
}

StatusOr<std::unique_ptr<Collectives>> Collectives::Create(const CollectivesOptions& options) {
  if (options.world_size < 1) {
    return Status::InvalidArgument("world size must be >= 1, got " +
                                   std::to_string(options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is outside [0, world size " +
                                   std::to_string(options.world_size) + ")");
  }
  if (options.timeout.count() <= 0)
    return Status::InvalidArgument("collective timeout must be positive");
  if (!options.device.is_cpu() && !options.device.is_cuda()) {
    return Status::InvalidArgument("collectives move CPU (Gloo) or CUDA (NCCL) tensors, not " +
                                   options.device.str());
  }
  const bool use_nccl = options.device.is_cuda();
#ifndef MLCD_WITH_NCCL
  if (use_nccl) {
    return Status::InvalidArgument(
        "collectives on " + options.device.str() +
        " need NCCL, but this mlcd-worker was built without it; rebuild with -DMLCD_WITH_CUDA=ON "
        "against a CUDA libtorch, or run on the cpu device (Gloo)");
  }
#endif
  if (options.world_size == 1) {
    std::unique_ptr<Collectives> local = Local(options.device);
    local->timeout_ = options.timeout;
    return local;
  }
  std::string host;
  int port = 0;
  MLCD_RETURN_IF_ERROR(SplitHostPort(options.rendezvous, "rendezvous", &host, &port));
  if (port == 0)
    return Status::InvalidArgument("rendezvous '" + options.rendezvous +
                                   "': port 0 is not a rendezvous port");

  std::unique_ptr<Collectives> c(new Collectives());
  c->rank_ = options.rank;
  c->world_size_ = options.world_size;
  c->device_ = options.device;
  c->timeout_ = options.timeout;
  c->group_ = std::make_unique<Group>();
  Group& g = *c->group_;

  MLCD_RETURN_IF_ERROR(ConnectStore(options, host, port, &g.store));
  MLCD_RETURN_IF_ERROR(JoinProcessGroup(options, host, use_nccl, g.store, &g.pg, &g.nccl));
  // The process group's constructor returns once this rank's own connections are up, which
  // can be before a peer has finished its handshake with it; a rank that then tore its group
  // down at once (a short command, a test with no steps) would break that peer's join. A
  // barrier makes Create() return only when every rank has joined, as the header promises.
  // (NCCL connects lazily at the first collective, on the device the caller chose; no barrier.)
  std::string message;
  const bool ok = g.nccl || CatchAll(
                                [&] {
                                  ::c10d::BarrierOptions barrier_options;
                                  barrier_options.timeout = options.timeout;
                                  g.pg->barrier(barrier_options)->wait();
                                },
                                &message);
  if (!ok) {
    return ClassifyError("rank " + std::to_string(options.rank) + " waiting for the other " +
                             std::to_string(options.world_size - 1) +
                             " ranks of the process group at " + options.rendezvous,
                         message);
  }
  MLCD_LOG(DEBUG) << "rank " << options.rank << "/" << options.world_size << " joined the "
                  << (g.nccl ? "nccl" : "gloo") << " group at " << options.rendezvous;
  return c;
}

const char* Collectives::backend_name() const {
  if (!group_) return "local";
  return group_->nccl ? "nccl" : "gloo";
}

Status Collectives::Run(const char* what, const std::function<void()>& body) {
  if (!failed_.ok()) {
    return Status::FailedPrecondition(
        std::string(what) + " on a process group that already failed: " + failed_.message());
  }
  std::string message;
  if (CatchAll(body, &message)) return Status::Ok();
  failed_ = ClassifyError(std::string(what) + " (rank " + std::to_string(rank_) + " of " +
                              std::to_string(world_size_) + ")",
                          message);
  return failed_;
}

Status Collectives::AllReduceFlat(at::Tensor& flat, ReduceOp op) {
  if (world_size_ == 1 || flat.numel() == 0) return Status::Ok();
  return Run("allreduce", [&] {
    std::vector<at::Tensor> tensors{flat};
    ::c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10d(op);
    opts.timeout = timeout_;
    group_->pg->allreduce(tensors, opts)->wait();
  });
}

// The work handle type of the linked libtorch (c10d::ProcessGroup::Work in 1.x, c10d::Work
// in 2.x), named by what allreduce returns.
struct PendingCollective::Work {
  decltype(std::declval<compat::C10dGroup&>().allreduce(
      std::declval<std::vector<at::Tensor>&>())) handle;
  std::vector<at::Tensor> tensors;  // kept alive until the wait
};

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

Status PendingCollective::Wait() {
  if (!launch_.ok()) return launch_;
  if (!work_) return Status::Ok();
  std::unique_ptr<Work> work = std::move(work_);
  return owner_->Run("allreduce", [&] { work->handle->wait(owner_->timeout_); });
}

PendingCollective Collectives::AllReduceAsync(const at::Tensor& tensor, ReduceOp op) {
  PendingCollective pending;
  pending.owner_ = this;
  if (!tensor.defined() || !tensor.is_contiguous()) {
    pending.launch_ = Status::InvalidArgument("asynchronous allreduce needs a contiguous tensor");
    return pending;
  }
  if (world_size_ == 1 || tensor.numel() == 0) return pending;
  auto work = std::make_unique<PendingCollective::Work>();
  work->tensors = {tensor};
  pending.launch_ = Run("allreduce", [&] {
    ::c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10d(op);
    opts.timeout = timeout_;
    work->handle = group_->pg->allreduce(work->tensors, opts);
  });
  if (pending.launch_.ok()) pending.work_ = std::move(work);
  return pending;
}

Status Collectives::AllReduce(at::Tensor& tensor, ReduceOp op) {
  if (!tensor.defined()) return Status::InvalidArgument("allreduce of an undefined tensor");
  if (tensor.is_contiguous()) return AllReduceFlat(tensor, op);
  std::vector<at::Tensor> one{tensor};
  return AllReduce(one, op);
}

Status Collectives::AllReduce(std::vector<at::Tensor>& tensors, ReduceOp op, int64_t bucket_bytes) {
  if (world_size_ == 1) return Status::Ok();
  // Buckets per dtype, filled in argument order (identical on every rank).
  std::map<at::ScalarType, std::vector<size_t>> open;
  std::map<at::ScalarType, int64_t> open_bytes;
  auto flush = [&](at::ScalarType type) -> Status {
    std::vector<size_t>& members = open[type];
    if (members.empty()) return Status::Ok();
    if (members.size() == 1 && tensors[members[0]].is_contiguous()) {
      Status s = AllReduceFlat(tensors[members[0]], op);
      members.clear();
      open_bytes[type] = 0;
      return s;
    }
    std::vector<at::Tensor> parts;
    parts.reserve(members.size());
    for (size_t i : members) parts.push_back(tensors[i].reshape({-1}));
    at::Tensor flat = at::cat(parts);
    MLCD_RETURN_IF_ERROR(AllReduceFlat(flat, op));
    int64_t offset = 0;
    for (size_t i : members) {
      int64_t n = tensors[i].numel();
      tensors[i].copy_(flat.narrow(0, offset, n).view(tensors[i].sizes()));
      offset += n;
    }
    members.clear();
    open_bytes[type] = 0;
    return Status::Ok();
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined())
      return Status::InvalidArgument("allreduce: tensor " + std::to_string(i) + " is undefined");
    if (t.numel() == 0) continue;
    int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    at::ScalarType type = t.scalar_type();
    if (open_bytes[type] > 0 && open_bytes[type] + bytes > bucket_bytes)
      MLCD_RETURN_IF_ERROR(flush(type));
    open[type].push_back(i);
    open_bytes[type] += bytes;
  }
  for (auto& entry : open) MLCD_RETURN_IF_ERROR(flush(entry.first));
  return Status::Ok();
}

Status Collectives::AllGather(const at::Tensor& input, at::Tensor* output) {
  if (!input.defined()) return Status::InvalidArgument("allgather of an undefined tensor");
  at::Tensor in = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  std::vector<int64_t> out_shape = in.sizes().vec();
  const int64_t n = out_shape[0];
  out_shape[0] = n * world_size_;
  if (world_size_ == 1) {
    *output = in.clone();
    return Status::Ok();
  }
  at::Tensor out = at::empty(out_shape, in.options());
  if (out.numel() > 0) {
    MLCD_RETURN_IF_ERROR(Run("allgather", [&] {
      std::vector<at::Tensor> inputs{in};
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_size_; ++r) outputs[0].push_back(out.narrow(0, r * n, n));
      ::c10d::AllgatherOptions opts;
      opts.timeout = timeout_;
      group_->pg->allgather(outputs, inputs, opts)->wait();
    }));
  }
  *output = out;
  return Status::Ok();
}

Status Collectives::ReduceScatter(const at::Tensor& input, at::Tensor* output) {
  if (!input.defined() || input.dim() == 0) {
    return Status::InvalidArgument("reduce-scatter needs a tensor with a leading dimension");
  }
  if (input.size(0) % world_size_ != 0) {
    return Status::InvalidArgument("reduce-scatter: leading dimension of " + DescribeTensor(input) +
                                   " is not a multiple of the world size " +
                                   std::to_string(world_size_));
  }
  at::Tensor in = input.contiguous();
  if (world_size_ == 1) {
    *output = in.clone();
    return Status::Ok();
  }
  const int64_t n = in.size(0) / world_size_;
  std::vector<int64_t> chunk_shape = in.sizes().vec();
  chunk_shape[0] = n;
  if (in.numel() == 0) {
    *output = at::empty(chunk_shape, in.options());
    return Status::Ok();
  }
  if (group_->nccl) {
    at::Tensor out = at::empty(chunk_shape, in.options());
    MLCD_RETURN_IF_ERROR(Run("reduce-scatter", [&] {
      ::c10d::ReduceScatterOptions opts;
      opts.reduceOp = ::c10d::ReduceOp(::c10d::ReduceOp::SUM);
      opts.timeout = timeout_;
      group_->pg->_reduce_scatter_base(out, in, opts)->wait();
    }));
    *output = out;
    return Status::Ok();
  }
  // Gloo: all-to-all of equal chunks (chunk j of rank r goes to rank j), then a local sum.
  at::Tensor received = at::empty_like(in);
  MLCD_RETURN_IF_ERROR(Run("reduce-scatter (all-to-all)", [&] {
    std::vector<int64_t> equal_splits;
    ::c10d::AllToAllOptions opts;
    opts.timeout = timeout_;
    group_->pg->alltoall_base(received, in, equal_splits, equal_splits, opts)->wait();
  }));
  std::vector<int64_t> view_shape = chunk_shape;
  view_shape.insert(view_shape.begin(), world_size_);
  *output = received.view(view_shape).sum(0);
  return Status::Ok();
}

Status Collectives::BroadcastFlat(at::Tensor& flat, int root) {
  if (world_size_ == 1 || flat.numel() == 0) return Status::Ok();
  return Run("broadcast", [&] {
    std::vector<at::Tensor> tensors{flat};
    ::c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout_;
    group_->pg->broadcast(tensors, opts)->wait();
  });
}

Status Collectives::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (root < 0 || root >= world_size_) {
    return Status::InvalidArgument("broadcast root " + std::to_string(root) + " outside [0, " +
                                   std::to_string(world_size_) + ")");
  }
  if (world_size_ == 1) return Status::Ok();
  std::map<at::ScalarType, std::vector<size_t>> by_type;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      return Status::InvalidArgument("broadcast: tensor " + std::to_string(i) + " is undefined");
    if (tensors[i].numel() > 0) by_type[tensors[i].scalar_type()].push_back(i);
  }
  for (auto& entry : by_type) {
    std::vector<at::Tensor> parts;
    for (size_t i : entry.second) parts.push_back(tensors[i].reshape({-1}));
    at::Tensor flat = parts.size() == 1 ? parts[0].contiguous() : at::cat(parts);
    MLCD_RETURN_IF_ERROR(BroadcastFlat(flat, root));
    int64_t offset = 0;
    for (size_t i : entry.second) {
      int64_t n = tensors[i].numel();
      if (rank_ != root) tensors[i].copy_(flat.narrow(0, offset, n).view(tensors[i].sizes()));
      offset += n;
    }
  }
  return Status::Ok();
}

Status Collectives::Barrier() {
  if (world_size_ == 1) return Status::Ok();
  return Run("barrier", [&] {
    ::c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    group_->pg->barrier(opts)->wait();
  });
}

}  // namespace mlcd::worker
