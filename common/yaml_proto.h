// A general YAML <-> protobuf codec by reflection: any message reads from and writes to a YAML
// mapping whose keys are the message's field names (snake_case, as in the .proto).
//
// Reading (YamlToMessage) is lenient and exhaustive: it never stops at the first problem but
// appends one SpecProblem per bad entry (path such as "spec.training.batch_sze (line 9)") and
// keeps every field that parsed:
//   - a key that is no field: "unknown field; did you mean batch_size?" (or the known fields);
//   - a message field needs a mapping, a repeated field a list, a map<string, string> field a
//     mapping of plain values, a scalar field a single value;
//   - integers in the field's range, decimal only (YAML 1.2: `010` is 10, `0x10` an error), doubles
//     finite, bools true/false, yes/no, on/off (lower case or
//     capitalised, and TRUE/FALSE), enums by
//     value name.
// `key:` with no value leaves the field unset.
//
// Writing (MessageToYaml) emits the fields that are set (proto3 ListFields: non-default
// scalars, present messages) as a block mapping, strings double-quoted, doubles with 17
// significant digits, so the text reads back to an equal message.
#pragma once

#include <string>
#include <vector>

#include "common/spec_problem.h"

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace google::protobuf {
class Message;
}  // namespace google::protobuf

namespace mlcd {

// Reads `node` (a mapping, or null for nothing) into `message`, merging into what it holds.
// Problem paths start with `path` ("spec" gives "spec.clustering.k").
void YamlToMessage(const YAML::Node& node, const std::string& path,
                   google::protobuf::Message* message, std::vector<SpecProblem>* problems);

// Appends `message` to `out` as one YAML mapping (the caller has opened a key's value or a
// document).
void MessageToYaml(const google::protobuf::Message& message, YAML::Emitter& out);

// " (line N)" for a node that has a position in the text, else "".
std::string YamlLineOf(const YAML::Node& node);

// How a problem names what it found: "a mapping", "a list", "'text'", "empty".
std::string YamlNodeKind(const YAML::Node& node);

// "unknown field; did you mean <nearest>?" when a known field is within a few edits of `key`
// (at most max(2, |key| / 3)), else "unknown field; known fields: a, b, c".
std::string UnknownFieldMessage(const std::string& key, const std::vector<std::string>& known);

}  // namespace mlcd
