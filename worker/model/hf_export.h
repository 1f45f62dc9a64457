// Encoders out for Hugging Face transformers (worker/model/export.h has the other formats):
// a directory that `from_pretrained(dir)` loads strictly (no missing, unexpected or misshapen
// keys), config.json + model.safetensors (worker/model/safetensors.h), tensors under the names
// transformers' own save_pretrained writes (the names the Hub's checkpoints use; transformers
// 5 renames them on load, 4.x loads them as they are).
//
//   hf-vit    transformers.ViTModel (AutoModel: model_type "vit"), for the "vit" layout.
//             Our projection to embed_dim is the pooler: pooler_output_size = embed_dim,
//             pooler_act "linear", pooler.dense.weight = head, pooler.dense.bias = 0, so
//             pooler_output IS our embedding and
//               h = model(pixel_values=x).last_hidden_state   # after the final LayerNorm
//               emb = model.pooler(h)                         # = h[:, 0] @ head.T
//             (config.json's "mlcd" entry says the same). The mapping:
//               cls_token [D]      -> embeddings.cls_token [1, 1, D]
//               pos_embed [T, D]   -> embeddings.position_embeddings [1, T, D]
//               patch_weight/bias  -> embeddings.patch_embeddings.projection (stride-p conv)
//               block<i>.norm1/2   -> encoder.layer.<i>.layernorm_before / layernorm_after
//               block<i>.qkv       -> ....attention.attention.query / key / value (rows q;k;v)
//               block<i>.proj      -> ....attention.output.dense
//               block<i>.fc1 / fc2 -> ....intermediate.dense / ....output.dense
//               norm               -> layernorm;  head -> pooler.dense (bias 0)
//   hf-vit-classifier
//             transformers.ViTForImageClassification, for the "vit" layout, where ViTModel's
//             pooler cannot hold our projection: transformers before 4.48 has no
//             pooler_output_size / pooler_act, so its pooler is tanh(Linear(width, width)).
//             The classifier over the class token after the final LayerNorm is our
//             projection (num_labels = embed_dim, classifier.bias = 0), so logits IS our
//             embedding; the base tensors are hf-vit's under "vit." and there is no pooler:
//               head -> classifier (bias 0);  everything else -> vit.<hf-vit name>
//   hf-clip   transformers.CLIPVisionModelWithProjection (model_type "clip_vision_model"), for
//             the "clip" layout: image_embeds is our embedding, hidden_states[i] our
//             HiddenStates()[i]; a LLaVA-style tower takes hidden_states[-2][:, 1:].
//               cls_token          -> vision_model.embeddings.class_embedding
//               patch_weight       -> vision_model.embeddings.patch_embedding.weight (no bias)
//               pos_embed          -> vision_model.embeddings.position_embedding.weight
//               pre_norm           -> vision_model.pre_layrnorm (sic)
//               block<i>.norm1/2   -> vision_model.encoder.layers.<i>.layer_norm1 / layer_norm2
//               block<i>.qkv       -> ....self_attn.q_proj / k_proj / v_proj
//               block<i>.proj      -> ....self_attn.out_proj
//               block<i>.fc1 / fc2 -> ....mlp.fc1 / mlp.fc2
//               norm               -> vision_model.post_layernorm;  head -> visual_projection
// Both: scale 1/sqrt(head_dim) attention, our LayerNorm eps and activation ("gelu" is
// transformers' exact GELU, "quick_gelu" its x * sigmoid(1.702 x)) written into the config.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/model/export.h"
#include "worker/model/vit.h"

namespace mlcd::worker {

// The transformers class each format is for: "ViTModel", "ViTForImageClassification",
// "CLIPVisionModelWithProjection".
const char* HfModelClass(ExportFormat format);

// OK when the format's transformers class computes exactly what `options` describes;
// otherwise FAILED_PRECONDITION naming every difference (layout, stem, pooling) and what to
// do instead. `format` is one of the IsHuggingFaceFormat formats.
Status CheckHfExpressible(ExportFormat format, const VitOptions& options);

// The state dict the format's class loads strictly (names as above), or
// CheckHfExpressible's error.
StatusOr<std::vector<ExportTensor>> HfStateDict(ExportFormat format, VisionTransformerImpl& model);

// config.json: the transformers config of the class, plus "mlcd": our ExportConfig and how to
// get our embedding (keys transformers keeps as attributes and otherwise ignores).
nlohmann::json HfConfig(ExportFormat format, const VitOptions& options,
                        const nlohmann::json& mlcd_config);

// Writes `model` to the directory `out` (created): model.safetensors and config.json.
// FAILED_PRECONDITION for a model the class cannot express, INVALID_ARGUMENT when `out` is a
// file.
StatusOr<ExportResult> ExportHuggingFace(VisionTransformerImpl& model,
                                         const ExportSettings& settings, const std::string& out,
                                         const nlohmann::json& source);

}  // namespace mlcd::worker
