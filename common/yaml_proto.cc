#include "common/yaml_proto.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

namespace mlcd {

namespace pb = google::protobuf;

std::string YamlLineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return " (line " + std::to_string(mark.line + 1) + ")";
}

std::string YamlNodeKind(const YAML::Node& node) {
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

namespace {

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

}  // namespace

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

namespace {

bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  // Base 10 only (YAML 1.2): `k: 010` is 10, never octal 8; `0x10` is not an integer here.
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

bool ParseUint64(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
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

// Reads YAML into a message by reflection, appending every problem it finds (yaml_proto.h).
class YamlToProto {
 public:
  explicit YamlToProto(std::vector<SpecProblem>* problems) : problems_(problems) {}

  void Message(const YAML::Node& node, const std::string& path, pb::Message* message) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      Problem(path + YamlLineOf(node), "expected a mapping of fields, got " + YamlNodeKind(node));
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
        Problem(field_path + YamlLineOf(it->first), UnknownFieldMessage(key, known));
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
        Problem(path + YamlLineOf(node),
                "expected a mapping of key: value, got " + YamlNodeKind(node));
        return;
      }
      const pb::Descriptor* entry = field->message_type();
      for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
        pb::Message* item = reflection->AddMessage(message, field);
        if (!it->second.IsScalar() && !it->second.IsNull()) {
          Problem(path + "." + key + YamlLineOf(it->second),
                  "expected a plain value, got " + YamlNodeKind(it->second));
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
        Problem(path + YamlLineOf(node), "expected a list, got " + YamlNodeKind(node) +
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
      Problem(path + YamlLineOf(node), "expected a single value, got " + YamlNodeKind(node));
      return;
    }
    const std::string text = node.Scalar();
    const std::string where = path + YamlLineOf(node);
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

void YamlToMessage(const YAML::Node& node, const std::string& path, pb::Message* message,
                   std::vector<SpecProblem>* problems) {
  YamlToProto(problems).Message(node, path, message);
}

void MessageToYaml(const pb::Message& message, YAML::Emitter& out) { EmitMessage(out, message); }

}  // namespace mlcd
