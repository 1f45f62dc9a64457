// A test fixture with a real cluster on loopback: the services and two idle worker agents
// (tests/coordinator/harness.h), whose logs are printed when the test fails.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/coordinator/harness.h"
#include "tests/testing/process.h"

namespace mlcd::testing {

class TwoWorkerClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(dir_);
    ASSERT_TRUE(cluster_->StartServices().ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->StartWorker(0, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->StartWorker(1, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->WaitForIdleWorkers(2, std::chrono::seconds(30)).ok()) << cluster_->Logs();
  }
  // Extra environment of both agents ("NAME=value"), which their children inherit.
  virtual std::vector<std::string> WorkerEnv() const { return {}; }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace mlcd::testing
