#include "labelstore/ownership.h"

#include <string_view>

#include "common/acting_for.h"

namespace mlcd::labelstore {
namespace {

constexpr std::string_view kJobSetPrefix = "job/";

bool IsJobSet(const std::string& name) { return name.rfind(kJobSetPrefix, 0) == 0; }

// "job:<id>" for a set "job/<id>[/...]".
std::string JobOwner(const std::string& name) {
  const size_t begin = kJobSetPrefix.size();
  const size_t end = name.find('/', begin);
  return std::string(kJobIdentityPrefix) +
         name.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

const char* ChangeName(SetChange change) {
  switch (change) {
    case SetChange::kWrite:
      return "write";
    case SetChange::kSeal:
      return "seal";
    case SetChange::kDelete:
      return "delete or replace";
  }
  return "change";
}

std::string Who(const Principal& actor) {
  return "'" + actor.identity + "' (role " + RoleName(actor.role) +
         (actor.via.empty() ? "" : ", through " + actor.via) + ")";
}

}  // namespace

std::string OwnerOfNewSet(const std::string& name, const Principal& actor) {
  return IsJobSet(name) ? JobOwner(name) : actor.identity;
}

Status CheckCreate(const std::string& name, const Principal& actor) {
  if (!actor.checked || !IsJobSet(name)) return Status::Ok();
  const std::string job = JobOwner(name);
  if (actor.identity == job) return Status::Ok();
  return Status(StatusCode::kPermissionDenied,
                "label set '" + name + "' would belong to " + job + ", and " + Who(actor) +
                    " may not create it: names under 'job/' are reserved for the jobs' own "
                    "rounds (the coordinator makes them); pick a name outside 'job/'");
}

Status CheckChange(const std::string& name, const std::string& owner, const Principal& actor,
                   SetChange change) {
  if (!actor.checked || (!owner.empty() && actor.identity == owner)) return Status::Ok();
  const bool admin = actor.role == Role::kAdmin;
  if (admin && (change == SetChange::kDelete || !IsJobSet(name))) return Status::Ok();
  const std::string owned_by = owner.empty()
                                   ? "has no recorded owner (made before owners were kept)"
                                   : "is owned by '" + owner + "'";
  const std::string rule = IsJobSet(name)
                               ? "only its job's own phases write a job's label sets (its "
                                 "gang's ranks with the write capability of their "
                                 "assignment); an admin may delete it"
                               : "only its owner or an admin may write, seal, replace or "
                                 "delete a label set; write a set of your own instead";
  return Status(StatusCode::kPermissionDenied, "label set '" + name + "' " + owned_by + "; " +
                                                   Who(actor) + " may not " + ChangeName(change) +
                                                   " it: " + rule);
}

}  // namespace mlcd::labelstore
