#include "common/status.h"

#include <grpcpp/support/status.h>
#include <gtest/gtest.h>

namespace mlcd {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  MLCD_ASSIGN_OR_RETURN(int h, Half(x));
  MLCD_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, CodesMapOntoGrpc) {
  Status s = Status::NotFound("label set 'x' does not exist");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "label set 'x' does not exist");
  EXPECT_EQ(FromGrpcStatus(g).code(), StatusCode::kNotFound);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")).code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(Status::Unauthenticated("no token").ToString(), "UNAUTHENTICATED: no token");
  EXPECT_EQ(s.ToString(), "NOT_FOUND: label set 'x' does not exist");
  EXPECT_EQ(s.WithContext("GetLabels").message(), "GetLabels: label set 'x' does not exist");
}

TEST(Status, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
  Status bad = Quarter(6, &out);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "odd: 3");
}

}  // namespace
}  // namespace mlcd
