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
#include "tests/coordinator/services_fixture.h"
#include "tests/testing/process.h"

namespace mlcd::testing {

class TwoWorkerClusterTest : public ServicesTest {
 protected:
  void SetUp() override {
    ServicesTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(cluster_->StartWorker(0, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->StartWorker(1, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->WaitForIdleWorkers(2, std::chrono::seconds(30)).ok()) << cluster_->Logs();
  }
  // Extra environment of both agents ("NAME=value"), which their children inherit.
  virtual std::vector<std::string> WorkerEnv() const { return {}; }
};

}  // namespace mlcd::testing
