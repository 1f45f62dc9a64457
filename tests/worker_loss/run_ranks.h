// Several ranks of one gang inside a test process: one thread per rank, each with its own
// real Gloo group joined over loopback (worker/dist/collectives.h).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// Runs body(rank, comm) on `world` threads and joins them; a rank whose group cannot be made
// fails the test.
inline void RunRanks(int world, const std::function<void(int, Collectives&)>& body,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(PickFreePort());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      CollectivesOptions options;
      options.rank = r;
      options.world_size = world;
      options.rendezvous = rendezvous;
      options.timeout = timeout;
      auto comm = Collectives::Create(options);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace mlcd::worker
