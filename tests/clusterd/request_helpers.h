// Helpers shared by the tests that drive a real mlcd-clusterd: a Cluster request, and the
// check that a call was refused for a path outside the data roots.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "clients/clusterd_client.h"
#include "common/status.h"

namespace mlcd::clusterd {

// Cluster `features` into `k` centres with `niter` iterations, centroids to `out`.
inline v1::ClusterRequest MakeClusterRequest(const std::string& features, int k, int niter,
                                             const std::string& out) {
  v1::ClusterRequest r;
  r.mutable_features()->add_paths(features);
  r.set_k(k);
  r.set_niter(niter);
  r.set_centroids_out(out);
  return r;
}

// Expects a PERMISSION_DENIED refusal naming `path`; returns its message with the path
// replaced by "<path>", so refusals of different paths can be compared.
inline std::string RefusalNamingPath(const Status& status, const std::string& path) {
  EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status.ToString();
  std::string m = status.message();
  const size_t at = m.find(path);
  EXPECT_NE(at, std::string::npos) << m;
  if (at != std::string::npos) m.replace(at, path.size(), "<path>");
  return m;
}

template <typename T>
std::string RefusalNamingPath(const StatusOr<T>& res, const std::string& path) {
  EXPECT_FALSE(res.ok());
  return RefusalNamingPath(res.status(), path);
}

}  // namespace mlcd::clusterd
