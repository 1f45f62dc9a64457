// Collectives: a c10d process group set up from (rank, world size, rendezvous, timeout), and
// the blocking collectives the worker needs.
//
//   CollectivesOptions opts;
//   opts.rank = 1; opts.world_size = 2; opts.rendezvous = "10.0.0.5:29500";
//   opts.timeout = std::chrono::seconds(300);
//   MLCD_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> comm, Collectives::Create(opts));
//   MLCD_RETURN_IF_ERROR(comm->AllReduce(grads, ReduceOp::kSum));   // fused, bucketed
//
// Rendezvous: rank 0 serves a c10d::TCPStore on the rendezvous port (it binds all
// interfaces); the other ranks connect to HOST:PORT, retrying until `timeout`. The group
// moves the tensors of one device, CollectivesOptions::device: c10d::ProcessGroupGloo for
// the CPU, c10d::ProcessGroupNCCL for a CUDA device (builds with MLCD_WITH_CUDA, a CMake
// option that defines MLCD_WITH_NCCL). World size 1 needs no process group, no store and no
// network: every collective is a local no-op (AllGather copies, ReduceScatter copies).
// NCCL's blocking wait (so a collective honours `timeout` and fails instead of hanging) is
// an environment setting read when the group is made; the executable sets it at start-up
// (SetNcclEnvironmentDefaults), library code never changes the environment.
//
// Every collective is blocking and runs under `timeout`: a peer that died makes the others
// fail (Gloo notices the closed connection at once; a peer that hangs is caught by the
// timeout) instead of hanging forever. Errors are returned as Status (never thrown):
//   UNAVAILABLE        a peer closed its connection / the transport failed;
//   DEADLINE_EXCEEDED  the collective or the rendezvous timed out;
//   ALREADY_EXISTS     rank 0 could not serve the store: another process listens on the
//                      rendezvous port (the caller may pick another port and start again);
//   INVALID_ARGUMENT   the caller passed tensors that do not fit the operation;
//   FAILED_PRECONDITION a collective had failed before: after a transport error the group
//                      is unusable (the peers' states are no longer in step), so every later
//                      call returns this, carrying the first error's message.
// All ranks must call the same collectives in the same order with the same shapes (c10d's
// rule); a mismatch is reported by the backend where it can detect it, otherwise it ends in
// the timeout.
//
// Thread safety: one thread at a time per Collectives object.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

// The environment NCCL's process groups need for a collective to fail at its timeout instead
// of hanging (blocking wait, asynchronous error handling), set unless the user set them.
// Call from main() before any thread starts: setenv is not thread-safe.
void SetNcclEnvironmentDefaults();

struct CollectivesOptions {
  int rank = 0;
  int world_size = 1;
  // HOST:PORT of rank 0's TCPStore. Ignored (may be empty) when world_size == 1.
  std::string rendezvous;
  // Applies to the rendezvous (connecting to the store, exchanging Gloo addresses) and to
  // every collective.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // The device whose tensors the collectives move: the CPU (Gloo) or this rank's CUDA device
  // (NCCL; INVALID_ARGUMENT in a build without it). One group serves everything of a rank
  // on that device: the backbone's gradients, the classification layer, clustering and
  // evaluation.
  c10::Device device = c10::Device(c10::kCPU);
  // Keys of this group in the store are prefixed with it. Several groups of one process may
  // use the same rendezvous with different prefixes (the store is multi-tenant).
  std::string store_prefix = "mlcd";
  // Where this rank's Gloo transport listens, as seen by the peers. Empty: the network
  // interface named by $GLOO_SOCKET_IFNAME if set; otherwise 127.0.0.1 when the rendezvous
  // host is a loopback address (all ranks on this machine); otherwise the address this
  // machine's hostname resolves to (c10d's default device).
  std::string gloo_hostname;
};

enum class ReduceOp { kSum, kMax, kMin };

class Collectives;

// A collective started by Collectives::AllReduceAsync: it runs on the backend's own threads
// (Gloo) or stream (NCCL) while the caller goes on. Wait() blocks until it is done, under the
// group's timeout, and returns its outcome; a launch that failed returns that error there.
// Every started collective must be waited for before its tensor is read or freed, and before
// the group's next blocking collective. Move-only; a default-made one is done and OK.
class PendingCollective {
 public:
  PendingCollective();
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;

  Status Wait();

 private:
  friend class Collectives;
  struct Work;  // the c10d work handle (collectives.cc)
  Collectives* owner_ = nullptr;
  Status launch_;
  std::unique_ptr<Work> work_;
};

// A process group and its collectives. Create() returns only after all `world_size` ranks
// have joined (or the timeout passed).
// Whether `status` is rank 0's failure to serve the store because another process listens
// on the rendezvous port (ALREADY_EXISTS from Create).
bool IsRendezvousPortTaken(const Status& status);

class Collectives {
 public:
  static StatusOr<std::unique_ptr<Collectives>> Create(const CollectivesOptions& options);
  // World size 1 without any process group, for tensors on `device`.
  static std::unique_ptr<Collectives> Local(c10::Device device = c10::Device(c10::kCPU));

  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // "local", "gloo" or "nccl".
  const char* backend_name() const;
  // The device whose tensors the collectives take.
  c10::Device device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // In-place allreduce of one contiguous tensor.
  Status AllReduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // The same, started now and finished by the returned handle's Wait() (a done handle at
  // world size 1). `tensor` must be contiguous and stay alive and untouched until then.
  PendingCollective AllReduceAsync(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // In-place allreduce of several tensors (any shapes, possibly different dtypes), fused:
  // tensors of one dtype are packed into flat buckets of at most `bucket_bytes` (a tensor
  // larger than that gets a bucket of its own), one collective per bucket, and unpacked.
  // This is the backbone-gradient path (libtorch's C++ API has no DDP).
  Status AllReduce(std::vector<at::Tensor>& tensors, ReduceOp op = ReduceOp::kSum,
                   int64_t bucket_bytes = 32 << 20);
  // Every rank contributes `input` (same shape and dtype on every rank); `*output` becomes a
  // new tensor [world_size * input.size(0), ...] holding rank 0's rows, then rank 1's, ...
  // A 0-d input is treated as shape [1].
  Status AllGather(const at::Tensor& input, at::Tensor* output);
  // `input` is [world_size * n, ...] on every rank; `*output` becomes [n, ...], the sum over
  // ranks of rows [rank * n, (rank + 1) * n). NCCL: native reduce-scatter. Gloo (which has no
  // reduce-scatter in c10d 1.13): an all-to-all of the chunks and a local sum, which moves
  // the same bytes as a ring reduce-scatter.
  Status ReduceScatter(const at::Tensor& input, at::Tensor* output);
  // In place: every rank's tensors become root's (fused like AllReduce).
  Status Broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  Status Barrier();

 private:
  friend class PendingCollective;
  struct Group;  // the c10d objects; collectives.cc only
  Collectives() = default;
  Status Run(const char* what, const std::function<void()>& body);
  Status AllReduceFlat(at::Tensor& flat, ReduceOp op);
  Status BroadcastFlat(at::Tensor& flat, int root);

  int rank_ = 0;
  int world_size_ = 1;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<Group> group_;
  Status failed_;  // first transport error; sticky
};

}  // namespace mlcd::worker
