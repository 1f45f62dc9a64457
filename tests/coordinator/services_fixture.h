// A GoogleTest fixture that starts the real mlcd-coordinator, mlcd-clusterd and mlcd-labelstore
// on loopback in a temporary directory before each test (no workers), and prints their logs
// when the test failed. Fixtures that need more derive from it and extend SetUp.
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "tests/coordinator/harness.h"
#include "tests/testing/process.h"

namespace mlcd::testing {

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(dir_);
    ASSERT_TRUE(cluster_->StartServices().ok()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace mlcd::testing
