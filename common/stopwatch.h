// Elapsed time of a piece of work, on the steady clock: the tree's one timing helper.
#pragma once

#include <chrono>

namespace mlcd {

// Seconds from `start` to `end`.
inline double SecondsBetween(std::chrono::steady_clock::time_point start,
                             std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Seconds from `start` to now.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return SecondsBetween(start, std::chrono::steady_clock::now());
}

}  // namespace mlcd
