// The worker agent's metrics proxy (worker/agent/metrics_proxy.h): a real registry served by
// a real MetricsServer, fetched over HTTP and parsed back, serializes to the same text; with
// no child, or a child that does not answer, the agent serves its own series only.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "common/metrics.h"
#include "worker/agent/metrics_proxy.h"

namespace mlcd::worker {
namespace {

std::string Text(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

TEST(MetricsProxyTest, ParsingTheTextFormatGivesBackTheSameFamilies) {
  prometheus::Registry registry;
  auto& steps =
      prometheus::BuildCounter().Name("mlcd_worker_steps_total").Help("Steps.").Register(registry);
  steps.Add({{"job_id", "j-1"}, {"rank", "0"}}).Increment(41);
  steps.Add({{"job_id", "j-1"}, {"rank", "1"}}).Increment(40);
  prometheus::BuildGauge()
      .Name("mlcd_worker_loss")
      .Help("Loss with \"quotes\" and a \\ backslash.")
      .Register(registry)
      .Add({{"job_id", "a\"b\\c"}})
      .Set(-3.25);
  auto& hist = prometheus::BuildHistogram()
                   .Name("mlcd_worker_step_seconds")
                   .Help("Step time.")
                   .Register(registry)
                   .Add({{"rank", "0"}}, prometheus::Histogram::BucketBoundaries{0.1, 1, 10});
  for (double v : {0.05, 0.5, 0.7, 5.0, 50.0}) hist.Observe(v);
  const std::string original = Text(registry.Collect());
  const std::string round_trip = Text(ParseMetricsText(original));
  EXPECT_EQ(round_trip, original);
  // Garbage lines are skipped, the rest kept.
  const auto parsed = ParseMetricsText("not a metric line{\nx_total{a=\"1\"} 2\n");
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0].name, "x_total");
  EXPECT_EQ(parsed[0].metric[0].untyped.value, 2);
}

TEST(MetricsProxyTest, TheAgentServesItsOwnSeriesAndTheChildsThroughOneEndpoint) {
  MetricsServer child;
  prometheus::BuildCounter()
      .Name("mlcd_worker_steps_total")
      .Help("Steps.")
      .Register(child.registry())
      .Add({{"rank", "0"}})
      .Increment(7);
  ASSERT_TRUE(child.Serve("127.0.0.1:0").ok());
  const std::string child_address = "127.0.0.1:" + std::to_string(child.port());

  auto proxy = std::make_shared<ChildMetricsProxy>(std::chrono::milliseconds(500));
  MetricsServer agent;
  AgentMetrics agent_metrics(agent.registry());
  agent.AddCollectable(proxy);
  ASSERT_TRUE(agent.Serve("127.0.0.1:0").ok());
  ChildMetricsProxy reader(std::chrono::milliseconds(2000));
  reader.SetTarget("127.0.0.1:" + std::to_string(agent.port()));

  // Idle: only the agent's own series.
  std::string idle = Text(reader.Collect());
  EXPECT_NE(idle.find("mlcd_agent_busy 0"), std::string::npos) << idle;
  EXPECT_EQ(idle.find("mlcd_worker_steps_total"), std::string::npos) << idle;

  // Training: the child's series come through the agent.
  agent_metrics.Busy(true);
  proxy->SetTarget(child_address);
  std::string training = Text(reader.Collect());
  EXPECT_NE(training.find("mlcd_worker_steps_total{rank=\"0\"} 7"), std::string::npos) << training;
  EXPECT_NE(training.find("mlcd_agent_busy 1"), std::string::npos) << training;

  // A child that went away: the agent still answers, without the child's series.
  proxy->SetTarget("127.0.0.1:1");
  agent_metrics.AssignmentEnded("train", "preempted");
  std::string gone = Text(reader.Collect());
  EXPECT_EQ(gone.find("mlcd_worker_steps_total"), std::string::npos) << gone;
  EXPECT_NE(gone.find("mlcd_agent_assignments_total{kind=\"train\",result=\"preempted\"} 1"),
            std::string::npos)
      << gone;
}

}  // namespace
}  // namespace mlcd::worker
