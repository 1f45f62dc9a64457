#include "common/job_spec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "common/idx.h"

namespace mlcd {

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> kPresets = {
      // CPU-sized models for 28x28 Fashion-MNIST: patch 7 gives 16 tokens.
      {"vit-tiny", 192, 6, 3, 7, 0},
      {"vit-small", 384, 12, 6, 7, 0},
      // Paper Table 8.
      {"vit-b32", 768, 12, 12, 32, 224},
      {"vit-b16", 768, 12, 12, 16, 224},
      {"vit-l14", 1024, 24, 16, 14, 224},
  };
  return kPresets;
}

StatusOr<ModelPreset> FindModelPreset(const std::string& name) {
  std::string known;
  for (const auto& p : ModelPresets()) {
    if (name == p.name) return p;
    known += known.empty() ? p.name : std::string(", ") + p.name;
  }
  return Status::InvalidArgument("unknown model preset '" + name + "'; known presets: " + known);
}

int ConvStemLayers(int image_size, int patch_size) {
  if (image_size < 1 || patch_size < 1 || image_size % patch_size != 0) return -1;
  int layers = 0;
  while ((1 << layers) < patch_size) ++layers;
  int side = image_size;
  for (int i = 0; i < layers; ++i) side = (side + 1) / 2;
  return side == image_size / patch_size ? layers : -1;
}

const std::vector<std::string>& EvaluationFeatureKinds() {
  static const std::vector<std::string> kinds = {"embedding", "pooled", "blocks", "tokens"};
  return kinds;
}

void ApplyJobSpecDefaults(v1::JobSpec* spec) {
  auto* data = spec->mutable_dataset();
  if (data->format().empty()) data->set_format("fashion-mnist");
  if (data->path().empty()) data->set_path(kFashionMnistDir);
  if (!data->has_augment()) data->set_augment(true);

  auto* clustering = spec->mutable_clustering();
  auto* features = clustering->mutable_features();
  if (features->kind().empty()) features->set_kind("pixels");
  if (features->kind() == "random-projection" && features->dim() == 0) features->set_dim(256);
  if (clustering->k() == 0) clustering->set_k(1000);
  if (clustering->l() == 0) clustering->set_l(8);
  if (clustering->niter() == 0) clustering->set_niter(20);
  if (clustering->max_points_per_centroid() == 0) clustering->set_max_points_per_centroid(256);
  if (clustering->search().empty()) clustering->set_search("exact");

  auto* loss = spec->mutable_loss();
  if (loss->variant().empty()) loss->set_variant("mlcd");
  if (loss->sample_ratio() == 0) loss->set_sample_ratio(0.1);
  if (loss->scale() == 0) loss->set_scale(32);
  if (!loss->has_margin()) loss->set_margin(0.3);
  if (loss->margin_type().empty()) loss->set_margin_type("arc");

  auto* model = spec->mutable_model();
  if (model->preset().empty()) model->set_preset("vit-tiny");
  auto preset = FindModelPreset(model->preset());
  if (preset.ok()) {
    if (model->width() == 0) model->set_width(preset->width);
    if (model->depth() == 0) model->set_depth(preset->depth);
    if (model->heads() == 0) model->set_heads(preset->heads);
    if (model->patch_size() == 0) model->set_patch_size(preset->patch_size);
    if (model->image_size() == 0 && preset->image_size) model->set_image_size(preset->image_size);
  }
  if (data->format() == "fashion-mnist") {
    if (model->image_size() == 0) model->set_image_size(28);
    if (model->channels() == 0) model->set_channels(1);
  }
  if (model->mlp_ratio() == 0) model->set_mlp_ratio(4);
  if (model->embed_dim() == 0) model->set_embed_dim(512);
  if (model->pooling().empty()) model->set_pooling("cls");
  if (model->stem().empty()) model->set_stem("patch");

  auto* opt = spec->mutable_optimizer();
  if (opt->name().empty()) opt->set_name("adamw");
  if (opt->lr() == 0) opt->set_lr(1e-3);
  if (!opt->has_weight_decay()) opt->set_weight_decay(0.2);
  if (opt->beta1() == 0) opt->set_beta1(0.9);
  if (opt->beta2() == 0) opt->set_beta2(0.98);
  if (!opt->has_warmup_fraction()) opt->set_warmup_fraction(0.05);
  if (opt->schedule().empty()) opt->set_schedule("cosine");
  if (opt->centre_lr_multiplier() == 0) opt->set_centre_lr_multiplier(1);
  if (opt->grad_clip_norm() == 0) opt->set_grad_clip_norm(5);

  auto* training = spec->mutable_training();
  if (training->epochs_per_round() == 0) training->set_epochs_per_round(1);
  if (training->batch_size() == 0) training->set_batch_size(256);
  if (training->world_size() == 0) training->set_world_size(1);
  if (!training->has_max_restarts()) training->set_max_restarts(3);
  if (training->heartbeat_timeout_seconds() == 0) training->set_heartbeat_timeout_seconds(30);
  if (training->collective_timeout_seconds() == 0) training->set_collective_timeout_seconds(120);
  if (training->label_prefetch_depth() == 0) training->set_label_prefetch_depth(4);
  if (training->rounds() == 0) training->set_rounds(1);
  if (training->centre_init().empty()) training->set_centre_init("auto");

  auto* eval = spec->mutable_evaluation();
  if (!eval->has_enabled()) eval->set_enabled(true);
  if (!eval->has_linear_probe()) eval->set_linear_probe(true);
  if (!eval->has_knn()) eval->set_knn(true);
  if (eval->knn_k() == 0) eval->set_knn_k(20);
  if (eval->knn_temperature() == 0) eval->set_knn_temperature(0.07);
  if (eval->features().empty()) eval->set_features("embedding");
  if (eval->feature_blocks() == 0)
    eval->set_feature_blocks(std::min(4, model->depth() > 0 ? model->depth() : 4));
  if (!eval->has_dataset()) *eval->mutable_dataset() = *data;
}

}  // namespace mlcd

// ---------------------------------------------------------------------------------------
// YAML parsing and validation.

namespace mlcd {
namespace {

namespace pb = google::protobuf;

constexpr const char* kApiVersion = "mlcd/v1";
constexpr const char* kKind = "TrainingJob";

// " (line N)" for a node that has a position in the text.
std::string LineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return " (line " + std::to_string(mark.line + 1) + ")";
}

std::string NodeKind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Null:
      return "empty";
    default:
      return "undefined";
  }
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string UnknownFieldMessage(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    size_t d = EditDistance(key, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  std::string message = "unknown field";
  if (!best.empty() && best_distance <= std::max<size_t>(2, key.size() / 3)) {
    message += "; did you mean " + best + "?";
  } else {
    message += "; known fields: ";
    for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + known[i];
  }
  return message;
}

bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseUint64(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseBool(const std::string& text, bool* out) {
  static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes", "on", "On"};
  static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No", "off", "Off"};
  if (kTrue.count(text)) {
    *out = true;
    return true;
  }
  if (kFalse.count(text)) {
    *out = false;
    return true;
  }
  return false;
}

class YamlToProto {
 public:
  explicit YamlToProto(std::vector<SpecProblem>* problems) : problems_(problems) {}

  void Message(const YAML::Node& node, const std::string& path, pb::Message* message) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      Problem(path + LineOf(node), "expected a mapping of fields, got " + NodeKind(node));
      return;
    }
    const pb::Descriptor* descriptor = message->GetDescriptor();
    std::vector<std::string> known;
    for (int i = 0; i < descriptor->field_count(); ++i)
      known.push_back(descriptor->field(i)->name());
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      const std::string field_path = path + "." + key;
      const pb::FieldDescriptor* field = descriptor->FindFieldByName(key);
      if (!field) {
        Problem(field_path + LineOf(it->first), UnknownFieldMessage(key, known));
        continue;
      }
      Field(it->second, field_path, message, field);
    }
  }

 private:
  void Problem(const std::string& path, const std::string& message) {
    problems_->push_back({path, message});
  }

  void Field(const YAML::Node& node, const std::string& path, pb::Message* message,
             const pb::FieldDescriptor* field) {
    if (node.IsNull()) return;  // `key:` with no value = unset
    const pb::Reflection* reflection = message->GetReflection();
    if (field->is_map()) {
      if (!node.IsMap()) {
        Problem(path + LineOf(node), "expected a mapping of key: value, got " + NodeKind(node));
        return;
      }
      const pb::Descriptor* entry = field->message_type();
      for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
        pb::Message* item = reflection->AddMessage(message, field);
        if (!it->second.IsScalar() && !it->second.IsNull()) {
          Problem(path + "." + key + LineOf(it->second),
                  "expected a plain value, got " + NodeKind(it->second));
          continue;
        }
        item->GetReflection()->SetString(item, entry->FindFieldByName("key"), key);
        item->GetReflection()->SetString(item, entry->FindFieldByName("value"),
                                         it->second.IsNull() ? "" : it->second.Scalar());
      }
      return;
    }
    if (field->is_repeated()) {
      if (!node.IsSequence()) {
        Problem(path + LineOf(node), "expected a list, got " + NodeKind(node) +
                                         " (write [a, b] or one '- item' per line)");
        return;
      }
      for (size_t i = 0; i < node.size(); ++i) {
        Single(node[i], path + "[" + std::to_string(i) + "]", message, field, /*repeated=*/true);
      }
      return;
    }
    Single(node, path, message, field, /*repeated=*/false);
  }

  void Single(const YAML::Node& node, const std::string& path, pb::Message* message,
              const pb::FieldDescriptor* field, bool repeated) {
    const pb::Reflection* r = message->GetReflection();
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      pb::Message* sub =
          repeated ? r->AddMessage(message, field) : r->MutableMessage(message, field);
      Message(node, path, sub);
      return;
    }
    if (!node.IsScalar()) {
      Problem(path + LineOf(node), "expected a single value, got " + NodeKind(node));
      return;
    }
    const std::string text = node.Scalar();
    const std::string where = path + LineOf(node);
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_STRING:
        repeated ? r->AddString(message, field, text) : r->SetString(message, field, text);
        return;
      case pb::FieldDescriptor::CPPTYPE_BOOL: {
        bool v;
        if (!ParseBool(text, &v)) return Problem(where, "'" + text + "' is not true or false");
        repeated ? r->AddBool(message, field, v) : r->SetBool(message, field, v);
        return;
      }
      case pb::FieldDescriptor::CPPTYPE_INT32:
      case pb::FieldDescriptor::CPPTYPE_INT64: {
        int64_t v;
        if (!ParseInt64(text, &v)) return Problem(where, "'" + text + "' is not a whole number");
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32) {
          if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
            return Problem(where, text + " is out of range for a 32-bit integer");
          }
          repeated ? r->AddInt32(message, field, static_cast<int32_t>(v))
                   : r->SetInt32(message, field, static_cast<int32_t>(v));
        } else {
          repeated ? r->AddInt64(message, field, v) : r->SetInt64(message, field, v);
        }
        return;
      }
      case pb::FieldDescriptor::CPPTYPE_UINT32:
      case pb::FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v;
        if (!ParseUint64(text, &v))
          return Problem(where, "'" + text + "' is not a whole number >= 0");
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT32) {
          if (v > std::numeric_limits<uint32_t>::max())
            return Problem(where, text + " is out of range");
          repeated ? r->AddUInt32(message, field, static_cast<uint32_t>(v))
                   : r->SetUInt32(message, field, static_cast<uint32_t>(v));
        } else {
          repeated ? r->AddUInt64(message, field, v) : r->SetUInt64(message, field, v);
        }
        return;
      }
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      case pb::FieldDescriptor::CPPTYPE_FLOAT: {
        double v;
        if (!ParseDouble(text, &v)) return Problem(where, "'" + text + "' is not a number");
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
          repeated ? r->AddDouble(message, field, v) : r->SetDouble(message, field, v);
        } else {
          repeated ? r->AddFloat(message, field, static_cast<float>(v))
                   : r->SetFloat(message, field, static_cast<float>(v));
        }
        return;
      }
      case pb::FieldDescriptor::CPPTYPE_ENUM: {
        const pb::EnumValueDescriptor* value = field->enum_type()->FindValueByName(text);
        if (!value)
          return Problem(
              where, "'" + text + "' is not one of the values of " + field->enum_type()->name());
        repeated ? r->AddEnum(message, field, value) : r->SetEnum(message, field, value);
        return;
      }
      default:
        Problem(where, "unsupported field type");
    }
  }

  std::vector<SpecProblem>* problems_;
};

// Problem collector for the value checks.
class Checker {
 public:
  Checker(std::vector<SpecProblem>* problems, std::string prefix)
      : problems_(problems), prefix_(std::move(prefix)) {}
  void Add(const std::string& field, const std::string& message) {
    problems_->push_back({prefix_.empty() ? field : prefix_ + "." + field, message});
  }
  template <typename T>
  void AtLeast(const std::string& field, T value, T min) {
    if (value < min) Add(field, Num(value) + " must be >= " + Num(min));
  }
  template <typename T>
  void Positive(const std::string& field, T value) {
    if (!(value > 0)) Add(field, Num(value) + " must be > 0");
  }
  void OneOf(const std::string& field, const std::string& value,
             const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + allowed[i];
    Add(field, "'" + value + "' is not one of: " + list);
  }
  template <typename T>
  static std::string Num(T v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }

 private:
  std::vector<SpecProblem>* problems_;
  std::string prefix_;
};

void YamlScalarField(YAML::Emitter& out, const pb::Message& message,
                     const pb::FieldDescriptor* field, int index);

void EmitMessage(YAML::Emitter& out, const pb::Message& message) {
  out << YAML::BeginMap;
  const pb::Reflection* r = message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    out << YAML::Key << field->name() << YAML::Value;
    if (field->is_map()) {
      out << YAML::BeginMap;
      for (int i = 0; i < r->FieldSize(message, field); ++i) {
        const pb::Message& entry = r->GetRepeatedMessage(message, field, i);
        const pb::Descriptor* d = entry.GetDescriptor();
        out << YAML::Key << entry.GetReflection()->GetString(entry, d->FindFieldByName("key"))
            << YAML::Value << YAML::DoubleQuoted
            << entry.GetReflection()->GetString(entry, d->FindFieldByName("value"));
      }
      out << YAML::EndMap;
    } else if (field->is_repeated()) {
      out << YAML::BeginSeq;
      for (int i = 0; i < r->FieldSize(message, field); ++i) {
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          EmitMessage(out, r->GetRepeatedMessage(message, field, i));
        } else {
          YamlScalarField(out, message, field, i);
        }
      }
      out << YAML::EndSeq;
    } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      EmitMessage(out, r->GetMessage(message, field));
    } else {
      YamlScalarField(out, message, field, -1);
    }
  }
  out << YAML::EndMap;
}

void YamlScalarField(YAML::Emitter& out, const pb::Message& message,
                     const pb::FieldDescriptor* field, int index) {
  const pb::Reflection* r = message.GetReflection();
  const bool rep = index >= 0;
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      out << YAML::DoubleQuoted
          << (rep ? r->GetRepeatedString(message, field, index) : r->GetString(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      out << (rep ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT32:
      out << (rep ? r->GetRepeatedInt32(message, field, index) : r->GetInt32(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      out << (rep ? r->GetRepeatedInt64(message, field, index) : r->GetInt64(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      out << (rep ? r->GetRepeatedUInt32(message, field, index) : r->GetUInt32(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      out << (rep ? r->GetRepeatedUInt64(message, field, index) : r->GetUInt64(message, field));
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      double v =
          field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE
              ? (rep ? r->GetRepeatedDouble(message, field, index) : r->GetDouble(message, field))
              : (rep ? r->GetRepeatedFloat(message, field, index) : r->GetFloat(message, field));
      std::ostringstream text;
      text.precision(17);
      text << v;
      out << text.str();
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      out << (rep ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field))->name();
      break;
    default:
      out << YAML::Null;
  }
}

}  // namespace

Status SpecProblemsToStatus(const std::vector<SpecProblem>& problems) {
  if (problems.empty()) return Status::Ok();
  std::string message = "invalid job spec (" + std::to_string(problems.size()) +
                        (problems.size() == 1 ? " problem" : " problems") + "):";
  for (const auto& p : problems) message += "\n  " + p.ToString();
  return Status::InvalidArgument(message);
}

ParsedJob ParseJobSpecYamlLenient(const std::string& text, std::vector<SpecProblem>* problems) {
  ParsedJob job;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    problems->push_back({"", "not valid YAML: line " + std::to_string(e.mark.line + 1) +
                                 ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg});
    return job;
  }
  if (!root.IsMap()) {
    problems->push_back(
        {"", "a job spec is a YAML mapping with apiVersion, kind, metadata and spec; got " +
                 NodeKind(root)});
    return job;
  }
  YamlToProto converter(problems);
  bool saw_api = false, saw_kind = false, saw_spec = false;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    const YAML::Node& value = it->second;
    if (key == "apiVersion") {
      saw_api = true;
      if (!value.IsScalar() || value.Scalar() != kApiVersion) {
        problems->push_back({"apiVersion" + LineOf(value),
                             (value.IsScalar() ? "'" + value.Scalar() + "'" : NodeKind(value)) +
                                 " is not supported; use " + kApiVersion});
      }
    } else if (key == "kind") {
      saw_kind = true;
      if (!value.IsScalar() || value.Scalar() != kKind) {
        problems->push_back({"kind" + LineOf(value),
                             (value.IsScalar() ? "'" + value.Scalar() + "'" : NodeKind(value)) +
                                 " is not supported; use " + kKind});
      }
    } else if (key == "metadata") {
      converter.Message(value, "metadata", &job.metadata);
    } else if (key == "spec") {
      saw_spec = true;
      converter.Message(value, "spec", &job.spec);
    } else {
      problems->push_back({key + LineOf(it->first),
                           UnknownFieldMessage(key, {"apiVersion", "kind", "metadata", "spec"})});
    }
  }
  if (!saw_api)
    problems->push_back(
        {"apiVersion", std::string("missing; add 'apiVersion: ") + kApiVersion + "'"});
  if (!saw_kind) problems->push_back({"kind", std::string("missing; add 'kind: ") + kKind + "'"});
  if (!saw_spec)
    problems->push_back({"spec", "missing; add a 'spec:' section (it may be empty: 'spec: {}')"});
  return job;
}

StatusOr<ParsedJob> ParseJobSpecYaml(const std::string& text) {
  std::vector<SpecProblem> problems;
  ParsedJob job = ParseJobSpecYamlLenient(text, &problems);
  if (!problems.empty()) return SpecProblemsToStatus(problems);
  return job;
}

uint64_t DatasetTrainingImages(const v1::DatasetSpec& dataset) {
  uint64_t split = 0;
  if (dataset.format() == "fashion-mnist" || dataset.format().empty()) split = 60000;
  if (dataset.limit() == 0) return split;
  return split ? std::min<uint64_t>(split, dataset.limit()) : dataset.limit();
}

std::vector<SpecProblem> JobMetadataProblems(const v1::JobMetadata& metadata,
                                             const std::string& path_prefix) {
  std::vector<SpecProblem> problems;
  Checker c(&problems, path_prefix);
  const std::string& name = metadata.name();
  if (name.size() > 100) c.Add("name", "longer than 100 characters");
  for (char ch : name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      c.Add("name", "'" + name + "' may only hold letters, digits, '-', '_' and '.'");
      break;
    }
  }
  for (const auto& [key, value] : metadata.labels()) {
    if (key.empty() || key.size() > 100) c.Add("labels", "label keys must be 1 to 100 characters");
    if (value.size() > 1000) c.Add("labels." + key, "value longer than 1000 characters");
  }
  return problems;
}

std::vector<SpecProblem> JobSpecProblems(const v1::JobSpec& spec, const std::string& path_prefix) {
  std::vector<SpecProblem> problems;
  const std::string p = path_prefix.empty() ? "" : path_prefix + ".";
  const uint64_t images = DatasetTrainingImages(spec.dataset());
  const std::string images_text =
      std::to_string(images) + " training images" +
      (spec.dataset().limit() ? " (" + p + "dataset.limit)" : " of " + spec.dataset().format());

  {
    Checker c(&problems, p + "dataset");
    c.OneOf("format", spec.dataset().format(), {"fashion-mnist"});
    if (spec.dataset().path().empty())
      c.Add("path", "empty; give the directory of the dataset's files");
    const double crop = spec.dataset().crop_min_scale();
    if (!(crop >= 0 && crop <= 1)) {
      c.Add("crop_min_scale", Checker::Num(crop) +
                                  " is outside [0, 1]; 0 = pad-and-crop, e.g. 0.5 = random resized "
                                  "crops of 50% to 100% of the image area");
    }
  }
  {
    const auto& cl = spec.clustering();
    Checker c(&problems, p + "clustering");
    const auto& f = cl.features();
    c.OneOf("features.kind", f.kind(), {"pixels", "random-projection", "npy", "model"});
    if (f.kind() == "npy" && f.paths().empty()) {
      c.Add("features.paths",
            "empty; kind 'npy' needs at least one .npy file or directory of shards");
    }
    if (f.kind() != "npy" && !f.paths().empty()) {
      c.Add("features.paths", "only read when features.kind is 'npy' (it is '" + f.kind() + "')");
    }
    for (int i = 0; i < f.paths_size(); ++i) {
      if (f.paths(i).empty()) c.Add("features.paths[" + std::to_string(i) + "]", "empty path");
    }
    if (f.kind() == "random-projection") c.AtLeast("features.dim", f.dim(), 1);
    c.AtLeast("k", cl.k(), 1);
    c.AtLeast("l", cl.l(), 1);
    if (cl.l() > 1024)
      c.Add("l",
            Checker::Num(cl.l()) + " > 1024, the most labels per sample the label store keeps");
    if (cl.k() >= 1 && cl.l() > cl.k())
      c.Add("l", Checker::Num(cl.l()) + " > k: " + Checker::Num(cl.k()));
    if (images > 0 && cl.k() > 0 && static_cast<uint64_t>(cl.k()) > images) {
      c.Add("k",
            Checker::Num(cl.k()) + " > the " + images_text + "; k-means needs at least k points");
    }
    c.AtLeast("niter", cl.niter(), 1);
    c.AtLeast("max_points_per_centroid", cl.max_points_per_centroid(), 1);
    c.OneOf("search", cl.search(), {"exact", "hnsw", "ivf"});
  }
  {
    const auto& loss = spec.loss();
    Checker c(&problems, p + "loss");
    c.OneOf("variant", loss.variant(), {"mlcd", "mlc", "softmax"});
    if (!(loss.sample_ratio() > 0 && loss.sample_ratio() <= 1)) {
      c.Add("sample_ratio", Checker::Num(loss.sample_ratio()) + " is not in (0, 1]");
    }
    if (!(loss.scale() > 0 && loss.scale() <= 128))
      c.Add("scale", Checker::Num(loss.scale()) + " is not in (0, 128]");
    if (!(loss.margin() >= 0 && loss.margin() <= 1))
      c.Add("margin", Checker::Num(loss.margin()) + " is not in [0, 1]");
    c.OneOf("margin_type", loss.margin_type(), {"arc", "cos", "none"});
  }
  {
    const auto& m = spec.model();
    Checker c(&problems, p + "model");
    auto preset = FindModelPreset(m.preset());
    if (!preset.ok()) c.Add("preset", preset.status().message());
    c.AtLeast("width", m.width(), 1);
    c.AtLeast("depth", m.depth(), 1);
    c.AtLeast("heads", m.heads(), 1);
    if (m.width() >= 1 && m.heads() >= 1 && m.width() % m.heads() != 0) {
      c.Add("width",
            Checker::Num(m.width()) + " is not divisible by heads: " + Checker::Num(m.heads()));
    }
    c.AtLeast("patch_size", m.patch_size(), 1);
    c.AtLeast("image_size", m.image_size(), 1);
    if (m.patch_size() >= 1 && m.image_size() >= 1 && m.image_size() % m.patch_size() != 0) {
      c.Add("image_size", Checker::Num(m.image_size()) +
                              " is not divisible by patch_size: " + Checker::Num(m.patch_size()));
    }
    c.AtLeast("channels", m.channels(), 1);
    c.Positive("mlp_ratio", m.mlp_ratio());
    c.AtLeast("embed_dim", m.embed_dim(), 1);
    c.OneOf("pooling", m.pooling(), {"cls", "mean"});
    c.OneOf("stem", m.stem(), {"patch", "conv"});
    if (m.stem() == "conv" && m.patch_size() >= 1 && m.image_size() >= 1 &&
        m.image_size() % m.patch_size() == 0 &&
        ConvStemLayers(m.image_size(), m.patch_size()) < 0) {
      c.Add("stem", "\"conv\" halves the image side with each layer and cannot reach " +
                        Checker::Num(m.image_size() / m.patch_size()) +
                        " tokens per side from image_size " + Checker::Num(m.image_size()) +
                        " (patch_size " + Checker::Num(m.patch_size()) +
                        "); use stem \"patch\" or a patch_size whose ceil(log2) halvings give "
                        "image_size / patch_size");
    }
  }
  {
    const auto& o = spec.optimizer();
    Checker c(&problems, p + "optimizer");
    c.OneOf("name", o.name(), {"adamw", "sgd"});
    c.Positive("lr", o.lr());
    if (o.weight_decay() < 0)
      c.Add("weight_decay", Checker::Num(o.weight_decay()) + " must be >= 0");
    if (!(o.beta1() >= 0 && o.beta1() < 1))
      c.Add("beta1", Checker::Num(o.beta1()) + " is not in [0, 1)");
    if (!(o.beta2() >= 0 && o.beta2() < 1))
      c.Add("beta2", Checker::Num(o.beta2()) + " is not in [0, 1)");
    if (!(o.warmup_fraction() >= 0 && o.warmup_fraction() < 1)) {
      c.Add("warmup_fraction", Checker::Num(o.warmup_fraction()) + " is not in [0, 1)");
    }
    c.OneOf("schedule", o.schedule(), {"cosine", "constant"});
    c.Positive("centre_lr_multiplier", o.centre_lr_multiplier());
  }
  {
    const auto& t = spec.training();
    Checker c(&problems, p + "training");
    c.AtLeast("epochs_per_round", t.epochs_per_round(), 1);
    c.AtLeast("batch_size", t.batch_size(), 1);
    c.AtLeast("world_size", t.world_size(), 1);
    if (t.world_size() > 1024) c.Add("world_size", Checker::Num(t.world_size()) + " > 1024");
    if (t.batch_size() >= 1 && t.world_size() >= 1 && t.batch_size() % t.world_size() != 0) {
      c.Add("batch_size", Checker::Num(t.batch_size()) +
                              " is not divisible by world_size: " + Checker::Num(t.world_size()));
    }
    if (images > 0 && t.batch_size() > 0 && static_cast<uint64_t>(t.batch_size()) > images) {
      c.Add("batch_size", Checker::Num(t.batch_size()) + " > the " + images_text +
                              "; an epoch drops its last partial batch, so it would have no step");
    }
    if (spec.clustering().k() > 0 && t.world_size() > spec.clustering().k()) {
      c.Add("world_size", Checker::Num(t.world_size()) +
                              " > clustering.k: " + Checker::Num(spec.clustering().k()) +
                              "; every rank holds a shard of the class centres");
    }
    c.AtLeast("checkpoint_every_steps", t.checkpoint_every_steps(), 0);
    c.AtLeast("threads_per_worker", t.threads_per_worker(), 0);
    c.AtLeast("max_restarts", t.max_restarts(), 0);
    c.AtLeast("heartbeat_timeout_seconds", t.heartbeat_timeout_seconds(), 1);
    c.AtLeast("collective_timeout_seconds", t.collective_timeout_seconds(), 1);
    c.AtLeast("label_prefetch_depth", t.label_prefetch_depth(), 1);
    c.AtLeast("rounds", t.rounds(), 1);
    if (t.rounds() > 100) c.Add("rounds", Checker::Num(t.rounds()) + " > 100");
    c.AtLeast("max_steps_per_epoch", t.max_steps_per_epoch(), 0);
    c.OneOf("centre_init", t.centre_init(), {"auto", "random", "centroids"});
  }
  {
    const auto& e = spec.evaluation();
    Checker c(&problems, p + "evaluation");
    if (e.enabled()) {
      c.AtLeast("knn_k", e.knn_k(), 1);
      c.Positive("knn_temperature", e.knn_temperature());
      c.OneOf("features", e.features(), EvaluationFeatureKinds());
      c.AtLeast("feature_blocks", e.feature_blocks(), 1);
      if (spec.model().depth() > 0 && e.feature_blocks() > spec.model().depth())
        c.Add("feature_blocks", Checker::Num(e.feature_blocks()) + " > model.depth " +
                                    Checker::Num(spec.model().depth()) +
                                    "; use at most the model's depth");
      c.OneOf("dataset.format", e.dataset().format(), {"fashion-mnist"});
    }
  }
  return problems;
}

Status ValidateJobSpec(v1::JobSpec* spec) {
  ApplyJobSpecDefaults(spec);
  return SpecProblemsToStatus(JobSpecProblems(*spec));
}

StatusOr<ParsedJob> LoadJobSpecYaml(const std::string& text) {
  std::vector<SpecProblem> problems;
  ParsedJob job = ParseJobSpecYamlLenient(text, &problems);
  // A field that did not parse stays unset and would be reported again (as its default or
  // as a relation to it); report only value problems of fields that parsed.
  std::vector<std::string> bad_paths;
  for (const auto& p : problems) bad_paths.push_back(p.path.substr(0, p.path.find(' ')));
  ApplyJobSpecDefaults(&job.spec);
  auto add = [&](const std::vector<SpecProblem>& more) {
    for (const auto& p : more) {
      if (std::find(bad_paths.begin(), bad_paths.end(), p.path) == bad_paths.end())
        problems.push_back(p);
    }
  };
  add(JobMetadataProblems(job.metadata));
  add(JobSpecProblems(job.spec));
  if (!problems.empty()) return SpecProblemsToStatus(problems);
  return job;
}

std::string JobSpecToYaml(const ParsedJob& job) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << kApiVersion;
  out << YAML::Key << "kind" << YAML::Value << kKind;
  out << YAML::Key << "metadata" << YAML::Value;
  EmitMessage(out, job.metadata);
  out << YAML::Key << "spec" << YAML::Value;
  EmitMessage(out, job.spec);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace mlcd
