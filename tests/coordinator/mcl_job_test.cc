// Multistage contrastive learning's submit refusals (spec.mcl; docs/mcl.md) through the real
// coordinator on loopback: K^N > M / b, a loss other than infonce, training.rounds other
// than the stages, and more than one round of plain InfoNCE, each naming its numbers.
#include <gtest/gtest.h>

#include <string>

#include "tests/coordinator/harness.h"
#include "tests/coordinator/services_fixture.h"

namespace mlcd::testing {
namespace {

class MclRefusalTest : public ServicesTest {};

TEST_F(MclRefusalTest, SubmitNamesTheNumbers) {
  // 4^2 = 16 > 384 / 64 = 6.
  TinyJob many = TinyMclJob();
  many.k = 4;
  auto refused = cluster_->Submit(many.Yaml());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "spec.mcl.stages: K^N = clustering.k^stages = 4^2 = 16 > M / b = 384 samples / "
                "batch_size 64 = 6"),
            std::string::npos)
      << refused.status().message();
  TinyJob mlcd = TinyMclJob();
  mlcd.loss = "{variant: mlcd}";
  refused = cluster_->Submit(mlcd.Yaml());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("loss.variant is 'mlcd'; set loss.variant: infonce"),
            std::string::npos)
      << refused.status().message();
  TinyJob rounds = TinyMclJob();
  rounds.rounds = 3;
  refused = cluster_->Submit(rounds.Yaml());
  EXPECT_NE(refused.status().message().find("2 stages, but training.rounds is 3"),
            std::string::npos)
      << refused.status().message();
  // A plain InfoNCE job trains one round.
  TinyJob plain = TinyMclJob();
  plain.more_spec.clear();
  refused = cluster_->Submit(plain.Yaml());
  EXPECT_NE(refused.status().message().find("spec.training.rounds: 2 rounds of loss.variant "
                                            "infonce"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace mlcd::testing
