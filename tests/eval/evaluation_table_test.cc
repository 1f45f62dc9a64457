// The tables `mlcdctl get` and `mlcdctl eval` print (client/evaluation_table.h): the
// multi-label metrics of the probe, the model's own predictions and each baseline, and the
// attribute probes with a column per model ("-" where a baseline did not score one).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "client/evaluation_table.h"

namespace mlcd::cli {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void Fill(double base, v1::MultiLabelMetrics* m) {
  m->set_mean_average_precision(base);
  m->set_hamming_accuracy(0.9);
  m->set_example_f1(0.5);
  m->set_macro_f1(0.4);
  m->set_micro_f1(0.6);
  m->set_precision_at_1(0.8);
  m->set_threshold(0.5);
  m->set_num_labels(10);
  m->set_labels_scored(9);
}

TEST(EvaluationTableTest, MultiLabelAndAttributeTablesPutTheBaselinesBeside) {
  v1::EvaluationResult e;
  Fill(0.7123, e.mutable_multi_label());
  Fill(0.65, e.mutable_model_predictions());
  auto* shape = e.add_attributes();
  shape->set_name("shape");
  shape->set_num_classes(10);
  shape->set_linear_probe_accuracy(0.81);
  auto* random = e.add_baselines();
  random->set_name("random-init");
  Fill(0.4, random->mutable_multi_label());
  *random->add_attributes() = *shape;
  random->mutable_attributes(0)->set_linear_probe_accuracy(0.4);
  e.add_baselines()->set_name("raw-pixels");  // scored neither

  const std::vector<std::string> lines = Lines(AnnotationTables(e, "  "));
  ASSERT_EQ(lines.size(), 6u) << AnnotationTables(e, "  ");
  EXPECT_EQ(lines[0].rfind("  multi-label", 0), 0u);
  EXPECT_NE(lines[0].find("10 labels (9 with test positives), threshold 0.5"), std::string::npos);
  EXPECT_EQ(lines[1].rfind("  trained       71.23 %", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("  predictions   65.00 %", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("  random init   40.00 %", 0), 0u) << lines[3];
  EXPECT_NE(lines[4].find("random init"), std::string::npos);
  EXPECT_NE(lines[4].find("raw pixels"), std::string::npos);
  std::istringstream row(lines[5]);
  std::vector<std::string> cells;
  for (std::string c; row >> c;) cells.push_back(c);
  EXPECT_EQ(cells, (std::vector<std::string>{"shape", "81.00", "%", "40.00", "%", "-", "(10",
                                             "classes)"}));
  EXPECT_EQ(AnnotationTables(v1::EvaluationResult(), "  "), "");
}

}  // namespace
}  // namespace mlcd::cli
