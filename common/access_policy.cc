#include "common/access_policy.h"

#include <array>

namespace mlcd {
namespace {

constexpr uint32_t R(Role r) { return static_cast<uint32_t>(r); }

constexpr uint32_t kViewers = R(Role::kViewer) | R(Role::kSubmitter) | R(Role::kAdmin);
constexpr uint32_t kSubmitters = R(Role::kSubmitter) | R(Role::kAdmin);
constexpr uint32_t kAdmins = R(Role::kAdmin);
constexpr uint32_t kWorkers = R(Role::kWorker) | R(Role::kService) | R(Role::kAdmin);
constexpr uint32_t kServices = R(Role::kService) | R(Role::kAdmin);

// The one method -> roles table (gRPC's own health and reflection services are not
// checked: they tell whether a service is up and what its API is, nothing else). Cancelling
// another submitter's job is refused by the coordinator (it records who submitted); changing
// another's label set by the label store (it records owners, labelstore/ownership.h);
// everything else is decided here.
constexpr std::array<MethodAccess, 24> kTable = {{
    // Coordinator: the user API.
    {"/mlcd.v1.Coordinator/SubmitJob", kSubmitters, true},
    {"/mlcd.v1.Coordinator/GetJob", kViewers, true},
    {"/mlcd.v1.Coordinator/ListJobs", kViewers, true},
    {"/mlcd.v1.Coordinator/WatchJob", kViewers, true},
    {"/mlcd.v1.Coordinator/CancelJob", kSubmitters, true},
    {"/mlcd.v1.Coordinator/ListWorkers", kAdmins, true},
    {"/mlcd.v1.Coordinator/DrainWorker", kAdmins, true},
    {"/mlcd.v1.Coordinator/BackupState", kAdmins, true},
    // Coordinator: the worker API (each call also bound to the worker's identity).
    {"/mlcd.v1.Coordinator/RegisterWorker", kWorkers, false},
    {"/mlcd.v1.Coordinator/GetAssignment", kWorkers, false},
    {"/mlcd.v1.Coordinator/Heartbeat", kWorkers, false},
    {"/mlcd.v1.Coordinator/ReportAssignment", kWorkers, false},
    {"/mlcd.v1.Coordinator/DeregisterWorker", kWorkers, false},
    // Label store.
    {"/mlcd.v1.LabelStore/CreateLabelSet", kSubmitters | kServices, false},
    // Workers reach it to write a job's round with the write capability of their assignment
    // (the capability, not the role, grants the write: labelstore/ownership.h).
    {"/mlcd.v1.LabelStore/WriteLabels", kSubmitters | kWorkers, false},
    // An OPEN set's owner delegates writes (labelstore/write_grants.h).
    {"/mlcd.v1.LabelStore/DelegateWrites", kSubmitters | kServices, false},
    {"/mlcd.v1.LabelStore/SealLabelSet", kSubmitters | kServices, false},
    {"/mlcd.v1.LabelStore/ListLabelSets", kViewers | kWorkers, false},
    {"/mlcd.v1.LabelStore/DescribeLabelSet", kViewers | kWorkers, false},
    {"/mlcd.v1.LabelStore/GetLabels", kViewers | kWorkers, false},
    {"/mlcd.v1.LabelStore/DeleteLabelSet", kSubmitters | kServices, false},
    // clusterd.
    {"/mlcd.v1.Clusterd/Cluster", kSubmitters | kServices, false},
    {"/mlcd.v1.Clusterd/Assign", kSubmitters | kServices, false},
    // A worker agent's status.
    {"/mlcd.v1.Worker/GetWorkerStatus", kViewers | kWorkers, false},
}};

}  // namespace

StatusOr<Role> ParseTokenRole(const std::string& name) {
  if (name == "viewer") return Role::kViewer;
  if (name == "submitter") return Role::kSubmitter;
  if (name == "admin") return Role::kAdmin;
  if (name == "worker") return Role::kWorker;
  return Status::InvalidArgument("role '" + name +
                                 "' is not one of viewer, submitter, admin, worker");
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kService:
      return "service";
    case Role::kNone:
      break;
  }
  return "none";
}

const MethodAccess* FindMethodAccess(std::string_view method) {
  for (const auto& entry : kTable) {
    if (entry.method == method) return &entry;
  }
  return nullptr;
}

std::string AllowedRolesText(uint32_t roles) {
  std::string text;
  for (Role r : {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kWorker, Role::kService}) {
    if (!(roles & R(r))) continue;
    text += (text.empty() ? "" : " or ") + std::string(RoleName(r));
  }
  return text;
}

}  // namespace mlcd
