// The enumerations of job specs and requests (common/enums.h): one spelling each.
#include "common/enums.h"

#include <gtest/gtest.h>

namespace mlcd {
namespace {

TEST(Enums, NamesRoundTrip) {
  for (const std::string& name : LossVariantNames()) {
    auto v = ParseLossVariant(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(LossVariantName(*v), name);
  }
  for (const std::string& name : MarginTypeNames()) {
    auto v = ParseMarginType(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(MarginTypeName(*v), name);
  }
  for (const std::string& name : SearchMethodNames()) {
    auto v = ParseSearchMethod(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(SearchMethodName(*v), name);
  }
}

TEST(Enums, SpellingsInDeclarationOrder) {
  EXPECT_EQ(LossVariantNames(), (std::vector<std::string>{"mlcd", "mlc", "softmax"}));
  EXPECT_EQ(MarginTypeNames(), (std::vector<std::string>{"arc", "cos", "none"}));
  EXPECT_EQ(SearchMethodNames(), (std::vector<std::string>{"exact", "hnsw", "ivf"}));
  EXPECT_EQ(*ParseLossVariant("mlc"), LossVariant::kMlc);
  EXPECT_EQ(*ParseMarginType("none"), MarginType::kNone);
  EXPECT_EQ(*ParseSearchMethod("ivf"), SearchMethod::kIvf);
}

TEST(Enums, UnknownSpellingListsTheAcceptedOnes) {
  auto v = ParseLossVariant("arcface");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(), "unknown loss variant 'arcface'; expected mlcd, mlc or softmax");
  auto m = ParseMarginType("Arc");  // case matters: one spelling each
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "unknown margin type 'Arc'; expected arc, cos or none");
  auto s = ParseSearchMethod("");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "unknown search method ''; expected exact, hnsw or ivf");
}

TEST(Enums, ContrastiveVariantsAndTheFamilyOfALossName) {
  EXPECT_EQ(ContrastiveVariantNames(),
            (std::vector<std::string>{"infonce", "mulsupcon", "supcon-all", "supcon-any"}));
  for (const std::string& name : ContrastiveVariantNames()) {
    auto v = ParseContrastiveVariant(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(ContrastiveVariantName(*v), name);
    EXPECT_EQ(*LossFamilyOf(name), LossFamily::kContrastive);
    EXPECT_FALSE(ParseLossVariant(name).ok());  // the families' spellings are disjoint
  }
  for (const std::string& name : LossVariantNames())
    EXPECT_EQ(*LossFamilyOf(name), LossFamily::kClassification);
  EXPECT_EQ(LabelHeadVariantNames(), (std::vector<std::string>{"bce", "mulcon"}));
  for (const std::string& name : LabelHeadVariantNames()) {
    auto v = ParseLabelHeadVariant(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(LabelHeadVariantName(*v), name);
    EXPECT_EQ(*LossFamilyOf(name), LossFamily::kLabelHead);
    EXPECT_FALSE(ParseLossVariant(name).ok());
    EXPECT_FALSE(ParseContrastiveVariant(name).ok());
  }
  auto f = LossFamilyOf("simclr");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "unknown loss variant 'simclr'; expected mlcd, mlc, softmax, infonce, mulsupcon, "
            "supcon-all, supcon-any, bce or mulcon");
}

}  // namespace
}  // namespace mlcd
