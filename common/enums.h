// The enumerations of job specs and requests, and their one spelling each. Strings are
// parsed into these once, at the edge (spec validation, flags, request decoding); code
// behind the edge passes the enums. Every Parse* returns INVALID_ARGUMENT naming the
// accepted spellings.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

// The classification loss (paper Eq. 6, Eq. 4, Eq. 3): "mlcd" | "mlc" | "softmax".
enum class LossVariant { kMlcd, kMlc, kSoftmax };
// A contrastive loss over the gathered global batch (worker/loss/contrastive_loss.h):
// "infonce" | "mulsupcon" | "supcon-all" | "supcon-any". Its spellings are disjoint from
// LossVariant's, so one `loss.variant` field can name either family: LossFamilyOf tells which
// parser to call next.
enum class ContrastiveVariant { kInfoNce, kMulSupCon, kSupConAll, kSupConAny };
// An objective trained through a head on the backbone, with per-sample label sets as
// multi-hot targets (docs/loss.md, "Label heads"): "bce" (image-level BCE over a linear head,
// worker/loss/bce_head.h) | "mulcon" (label-level embeddings, BCE and the label-level
// contrastive loss, worker/model/label_attention_head.h). Spellings disjoint from the others.
enum class LabelHeadVariant { kBce, kMulCon };
// The family of a loss variant's name: LossVariant's (classification layer),
// ContrastiveVariant's or LabelHeadVariant's.
enum class LossFamily { kClassification, kContrastive, kLabelHead };
// The margin on positive logits: "arc" | "cos" | "none".
enum class MarginType { kArc, kCos, kNone };
// How clusterd finds an embedding's nearest centres: "exact" | "hnsw" | "ivf".
enum class SearchMethod { kExact, kHnsw, kIvf };
// The backbone's arithmetic in training (docs/torch-builds.md, "Precision"): "fp32" | "bf16"
// (autocast: matmuls and attention in bfloat16, the residual stream, LayerNorm and GELU
// float32) | "bf16-activations" (every activation bfloat16, the forward's input included;
// parameters cast once per forward). In every mode the parameters, gradients, optimizer state,
// the class centres, logits and loss are float32.
enum class Precision { kFp32, kBf16, kBf16Activations };
// The layout of a dataset's images (docs/data.md): "fashion-mnist" | "image-folder" |
// "webdataset".
enum class DatasetFormat { kFashionMnist, kImageFolder, kWebDataset };
// Who clusters a job's features and assigns its labels: "clusterd" | "gang" (the job's
// workers over c10d; docs/clusterd.md, "Which engine").
enum class ClusteringEngine { kClusterd, kGang };

StatusOr<LossVariant> ParseLossVariant(const std::string& name);
StatusOr<ContrastiveVariant> ParseContrastiveVariant(const std::string& name);
StatusOr<LabelHeadVariant> ParseLabelHeadVariant(const std::string& name);
// The family `name` belongs to; INVALID_ARGUMENT listing the spellings of every family.
StatusOr<LossFamily> LossFamilyOf(const std::string& name);
StatusOr<MarginType> ParseMarginType(const std::string& name);
StatusOr<SearchMethod> ParseSearchMethod(const std::string& name);
StatusOr<Precision> ParsePrecision(const std::string& name);
StatusOr<DatasetFormat> ParseDatasetFormat(const std::string& name);
StatusOr<ClusteringEngine> ParseClusteringEngine(const std::string& name);

const char* LossVariantName(LossVariant value);
const char* ContrastiveVariantName(ContrastiveVariant value);
const char* LabelHeadVariantName(LabelHeadVariant value);
const char* MarginTypeName(MarginType value);
const char* SearchMethodName(SearchMethod value);
const char* PrecisionName(Precision value);
// Whether `value` computes in bfloat16 (kBf16, kBf16Activations): the classification layer's
// GEMMs and the clustering search follow it.
bool UsesBf16(Precision value);
const char* DatasetFormatName(DatasetFormat value);
const char* ClusteringEngineName(ClusteringEngine value);

// Every spelling, in declaration order (for validation messages and CLI choices).
const std::vector<std::string>& LossVariantNames();
const std::vector<std::string>& ContrastiveVariantNames();
const std::vector<std::string>& LabelHeadVariantNames();
const std::vector<std::string>& MarginTypeNames();
const std::vector<std::string>& SearchMethodNames();
const std::vector<std::string>& PrecisionNames();
const std::vector<std::string>& DatasetFormatNames();
const std::vector<std::string>& ClusteringEngineNames();

}  // namespace mlcd
