#include "worker/loss/device_timer.h"

#ifdef MLCD_WITH_NCCL
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mlcd::worker {

struct DeviceTimer::Events {
#ifdef MLCD_WITH_NCCL
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> list;
#endif
};

DeviceTimer::DeviceTimer(c10::Device device)
    : device_(device), events_(std::make_unique<Events>()) {}

DeviceTimer::~DeviceTimer() = default;

int DeviceTimer::Mark() {
#ifdef MLCD_WITH_NCCL
  if (device_.is_cuda()) {
    auto event = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    event->record(c10::cuda::getCurrentCUDAStream(device_.index()));
    events_->list.push_back(std::move(event));
    return static_cast<int>(events_->list.size()) - 1;
  }
#endif
  wall_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(wall_.size()) - 1;
}

double DeviceTimer::Seconds(int from, int to) {
#ifdef MLCD_WITH_NCCL
  if (device_.is_cuda()) {
    auto& list = events_->list;
    list[static_cast<size_t>(to)]->synchronize();
    return list[static_cast<size_t>(from)]->elapsed_time(*list[static_cast<size_t>(to)]) / 1000.0;
  }
#endif
  return std::chrono::duration<double>(wall_[static_cast<size_t>(to)] -
                                       wall_[static_cast<size_t>(from)])
      .count();
}

}  // namespace mlcd::worker
