// DeviceTimer: time points on a device's work without synchronising it. On a CUDA device (in
// builds with MLCD_WITH_NCCL, the CUDA builds) each Mark() records a timing CUDA event on
// the current stream and Seconds() reads the events' elapsed time; call Seconds() only
// after the host has waited for the marked work (e.g. after reading a result), or it waits.
// Elsewhere (CPU tensors) Mark() takes the wall clock.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <vector>

namespace mlcd::worker {

class DeviceTimer {
 public:
  explicit DeviceTimer(c10::Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // Records the next time point (index 0, 1, ...) and returns its index.
  int Mark();
  // Seconds from point `from` to point `to`.
  double Seconds(int from, int to);

 private:
  struct Events;  // the CUDA events (device_timer.cc)
  c10::Device device_;
  std::vector<std::chrono::steady_clock::time_point> wall_;
  std::unique_ptr<Events> events_;
};

}  // namespace mlcd::worker
