#include "common/enums.h"

#include <cstddef>

namespace mlcd {
namespace {

// The refusal of `name`, which is none of `names`.
Status UnknownName(const std::vector<std::string>& names, const std::string& what,
                   const std::string& name) {
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return Status::InvalidArgument("unknown " + what + " '" + name + "'; expected " + expected);
}

// The spellings of enum E, indexed by its value.
template <typename E>
StatusOr<E> ParseByName(const std::vector<std::string>& names, const std::string& what,
                        const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return UnknownName(names, what, name);
}

template <typename E>
const char* NameOf(const std::vector<std::string>& names, E value) {
  const size_t i = static_cast<size_t>(value);
  return i < names.size() ? names[i].c_str() : "?";
}

}  // namespace

const std::vector<std::string>& LossVariantNames() {
  static const std::vector<std::string> names = {"mlcd", "mlc", "softmax"};
  return names;
}
const std::vector<std::string>& ContrastiveVariantNames() {
  static const std::vector<std::string> names = {"infonce", "mulsupcon", "supcon-all",
                                                 "supcon-any"};
  return names;
}
const std::vector<std::string>& LabelHeadVariantNames() {
  static const std::vector<std::string> names = {"bce", "mulcon"};
  return names;
}
const std::vector<std::string>& MarginTypeNames() {
  static const std::vector<std::string> names = {"arc", "cos", "none"};
  return names;
}
const std::vector<std::string>& SearchMethodNames() {
  static const std::vector<std::string> names = {"exact", "hnsw", "ivf"};
  return names;
}
const std::vector<std::string>& PrecisionNames() {
  static const std::vector<std::string> names = {"fp32", "bf16", "bf16-activations"};
  return names;
}

const std::vector<std::string>& DatasetFormatNames() {
  static const std::vector<std::string> names = {"fashion-mnist", "image-folder", "webdataset"};
  return names;
}

const std::vector<std::string>& ClusteringEngineNames() {
  static const std::vector<std::string> names = {"clusterd", "gang"};
  return names;
}

StatusOr<LossVariant> ParseLossVariant(const std::string& name) {
  return ParseByName<LossVariant>(LossVariantNames(), "loss variant", name);
}
StatusOr<ContrastiveVariant> ParseContrastiveVariant(const std::string& name) {
  return ParseByName<ContrastiveVariant>(ContrastiveVariantNames(), "contrastive loss variant",
                                         name);
}
StatusOr<LabelHeadVariant> ParseLabelHeadVariant(const std::string& name) {
  return ParseByName<LabelHeadVariant>(LabelHeadVariantNames(), "label head variant", name);
}
StatusOr<LossFamily> LossFamilyOf(const std::string& name) {
  if (ParseLossVariant(name).ok()) return LossFamily::kClassification;
  if (ParseContrastiveVariant(name).ok()) return LossFamily::kContrastive;
  if (ParseLabelHeadVariant(name).ok()) return LossFamily::kLabelHead;
  std::vector<std::string> all = LossVariantNames();
  for (const std::string& n : ContrastiveVariantNames()) all.push_back(n);
  for (const std::string& n : LabelHeadVariantNames()) all.push_back(n);
  return UnknownName(all, "loss variant", name);
}
StatusOr<MarginType> ParseMarginType(const std::string& name) {
  return ParseByName<MarginType>(MarginTypeNames(), "margin type", name);
}
StatusOr<SearchMethod> ParseSearchMethod(const std::string& name) {
  return ParseByName<SearchMethod>(SearchMethodNames(), "search method", name);
}
StatusOr<Precision> ParsePrecision(const std::string& name) {
  return ParseByName<Precision>(PrecisionNames(), "precision", name);
}
StatusOr<DatasetFormat> ParseDatasetFormat(const std::string& name) {
  return ParseByName<DatasetFormat>(DatasetFormatNames(), "dataset format", name);
}
StatusOr<ClusteringEngine> ParseClusteringEngine(const std::string& name) {
  return ParseByName<ClusteringEngine>(ClusteringEngineNames(), "clustering engine", name);
}

const char* LossVariantName(LossVariant value) { return NameOf(LossVariantNames(), value); }
const char* ContrastiveVariantName(ContrastiveVariant value) {
  return NameOf(ContrastiveVariantNames(), value);
}
const char* LabelHeadVariantName(LabelHeadVariant value) {
  return NameOf(LabelHeadVariantNames(), value);
}
const char* MarginTypeName(MarginType value) { return NameOf(MarginTypeNames(), value); }
const char* SearchMethodName(SearchMethod value) { return NameOf(SearchMethodNames(), value); }
const char* PrecisionName(Precision value) { return NameOf(PrecisionNames(), value); }
bool UsesBf16(Precision value) { return value != Precision::kFp32; }
const char* DatasetFormatName(DatasetFormat value) { return NameOf(DatasetFormatNames(), value); }
const char* ClusteringEngineName(ClusteringEngine value) {
  return NameOf(ClusteringEngineNames(), value);
}

}  // namespace mlcd
