// The names of the output areas under an output root DIR (docs/hardening.md, "Outputs"): one
// folder per identity, so an identity only ever replaces files it made itself.
//   DIR/users/<kind>/<name>/   the identity "<kind>:<name>" (token:alice -> users/token/alice)
//   DIR/users/anonymous/       no identity (security off)
//   DIR/jobs/<id>/             job:<id>, the coordinator's phases and gangs for that job
// DIR is mlcd-clusterd's --output-root and the coordinator's --data-dir (the same folder in
// `mlcdctl local up`, the tests and deploy/k8s). Every name is escaped (EscapePathSegment), so
// two identities never share a folder and no name climbs out of its own. Pure functions: no
// file is looked at.
#pragma once

#include <string>

namespace mlcd {

// "alice" stays "alice"; any byte outside [A-Za-z0-9._@-] becomes %XX, and a name of dots
// only ("." or "..") has every dot escaped, so the result is one safe path segment and
// different names never share one.
std::string EscapePathSegment(const std::string& name);

// The area of `identity` ("token:alice", "cert:CN", "job:ID", "" for none) under `root` (no
// trailing '/'), by the table above.
std::string OutputAreaOf(const std::string& root, const std::string& identity);

// True when `resolved` (absolute, no links, "." or "..") lies strictly inside `area`: the area
// itself is no output path.
bool InsideArea(const std::string& resolved, const std::string& area);

}  // namespace mlcd
