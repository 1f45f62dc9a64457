// The label heads' tensors in and out of safetensors files (worker/model/safetensors.h),
// under the names docs/export.md documents:
//
//   bce_head.weight [K, D], bce_head.bias [K]         the `bce` objective's linear head
//                                                     (worker/loss/bce_head.h)
//   mulcon_head.<name>                                 every parameter of the `mulcon` head by
//                                                     its LabelAttentionHeadImpl name
//                                                     (worker/model/label_attention_head.h),
//                                                     e.g. mulcon_head.label_embeddings [L, C]
//   metadata "mulcon_head.heads": "<h>"               the attention heads (not a shape)
//
// A head file read back gives the head again (ReadMulconHead), which `mlcd-worker loss-check`
// uses to take a MulCon head from outside.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/loss/bce_head.h"
#include "worker/model/export.h"
#include "worker/model/label_attention_head.h"
#include "worker/model/safetensors.h"

namespace mlcd::worker {

inline constexpr char kBceHeadPrefix[] = "bce_head.";
inline constexpr char kMulconHeadPrefix[] = "mulcon_head.";
inline constexpr char kMulconHeadsKey[] = "mulcon_head.heads";
// The file a checkpoint keeps a trained label head in (worker/train/label_head_objective.h).
inline constexpr char kLabelHeadFile[] = "label_head.safetensors";

// The head's parameters as float32 CPU tensors named prefix + named_parameters() name, in
// that order.
std::vector<ExportTensor> HeadStateDict(torch::nn::Module& head, const std::string& prefix);

// The metadata a MulCon head's file carries (kMulconHeadsKey).
std::map<std::string, std::string> MulconHeadMetadata(const LabelAttentionHeadImpl& head);

// Writes `tensors` to `path` (atomically) with `metadata`.
Status WriteHeadSafetensors(const std::string& path, const std::vector<ExportTensor>& tensors,
                            const std::map<std::string, std::string>& metadata);

// A MulCon head from a file holding its mulcon_head.* tensors: C, L, D and d_z from the
// shapes, h from the metadata. INVALID_ARGUMENT naming a missing tensor or key, a wrong shape,
// or options ValidateLabelAttentionOptions refuses.
StatusOr<LabelAttentionHead> ReadMulconHead(const SafetensorsFile& file);

// `mlcd-worker export`'s head: when `checkpoint_dir` holds a trained label head
// (kLabelHeadFile), writes its tensors and metadata, read back and checked, beside the export
// `out`: <out>/label_head.safetensors for a directory format (`directory`), else
// <out without its extension>.head.safetensors. Returns the path written, or "" when the
// checkpoint has no head (an MLCD or contrastive job).
StatusOr<std::string> ExportCheckpointHead(const std::string& checkpoint_dir,
                                           const std::string& out, bool directory);

// Copies the file's prefix + name tensors into the head's parameters (every parameter must
// be there with its shape; INVALID_ARGUMENT naming the first that is not).
Status LoadHeadTensors(torch::nn::Module& head, const SafetensorsFile& file,
                       const std::string& prefix);

}  // namespace mlcd::worker
