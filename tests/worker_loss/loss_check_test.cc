// `mlcd-worker loss-check` as a user runs it: the same outputs at world sizes 1, 2 and 3 (real
// processes over Gloo), the documented output files, and clear errors for bad inputs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::TempDir;

void Save(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  NpyDtype dtype = c.scalar_type() == at::kFloat    ? NpyDtype::kFloat32
                   : c.scalar_type() == at::kDouble ? NpyDtype::kFloat64
                   : c.scalar_type() == at::kInt    ? NpyDtype::kInt32
                                                    : NpyDtype::kInt64;
  ASSERT_TRUE(WriteNpy(path, dtype, c.sizes().vec(), c.data_ptr()).ok()) << path;
}

at::Tensor Load(const std::string& path, std::vector<int64_t>* shape) {
  auto data = ReadNpyAsFloat32(path, shape);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  if (!data.ok()) return at::Tensor();
  return at::from_blob(data->data(), {static_cast<int64_t>(data->size())}, at::kFloat).clone();
}

class LossCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::Generator gen = at::detail::createCPUGenerator(5);
    E_ = at::randn({B_, D_}, gen, at::kFloat);
    W_ = at::randn({K_, D_}, gen, at::kFloat);
    Y_ = at::randint(0, K_, {B_, 3}, gen, at::kLong);
    Y_[1][2] = -1;
    Y_[4][1] = -1;
    Y_[4][2] = -1;
    Y_[6] = -1;  // a sample with no label at all
    N_ = at::tensor(std::vector<int64_t>{0, 2, 5, 5, 11});
    Save(dir_.Sub("E.npy"), E_);
    Save(dir_.Sub("W.npy"), W_);
    Save(dir_.Sub("Y.npy"), Y_);
    Save(dir_.Sub("N.npy"), N_);
  }

  std::vector<std::string> Args(const std::string& variant, const std::string& margin_type,
                                int world, const std::string& out) {
    return {"loss-check",
            "--embeddings",
            dir_.Sub("E.npy"),
            "--weights",
            dir_.Sub("W.npy"),
            "--labels",
            dir_.Sub("Y.npy"),
            "--negatives",
            dir_.Sub("N.npy"),
            "--variant",
            variant,
            "--scale",
            "24",
            "--margin",
            "0.3",
            "--margin-type",
            margin_type,
            "--world-size",
            std::to_string(world),
            "--out",
            out};
  }

  struct Outputs {
    at::Tensor loss, grad_e, grad_w;
  };
  Outputs Run(const std::vector<std::string>& args, const std::string& out, int64_t rows = -1) {
    if (rows < 0) rows = B_;
    std::string log;
    int rc = RunCommand(BinPath("mlcd-worker"), args, &log, {"MLCD_NO_BLAS_TUNING=1"});
    EXPECT_EQ(rc, 0) << log;
    Outputs o;
    std::vector<int64_t> shape;
    o.loss = Load(out + "/loss.npy", &shape);
    EXPECT_TRUE(shape.empty());  // 0-d
    o.grad_e = Load(out + "/grad_embeddings.npy", &shape);
    EXPECT_EQ(shape, (std::vector<int64_t>{rows, D_}));
    o.grad_w = Load(out + "/grad_weights.npy", &shape);
    EXPECT_EQ(shape, (std::vector<int64_t>{K_, D_}));
    if (o.grad_w.defined()) o.grad_w = o.grad_w.view({K_, D_});
    return o;
  }

  // Exit code 2 and a message containing `needle`.
  void ExpectRejected(std::vector<std::string> args, const std::string& needle) {
    std::string log;
    int rc = RunCommand(BinPath("mlcd-worker"), args, &log, {"MLCD_NO_BLAS_TUNING=1"});
    EXPECT_EQ(rc, 2) << log;
    EXPECT_NE(log.find(needle), std::string::npos) << "expected '" << needle << "' in: " << log;
  }

  const int64_t B_ = 7, D_ = 5, K_ = 13;
  TempDir dir_;
  at::Tensor E_, W_, Y_, N_;
};

TEST_F(LossCheckTest, WorldSizesTwoAndThreeMatchOne) {
  for (std::string variant : {"mlcd", "mlc", "softmax"}) {
    SCOPED_TRACE(variant);
    Outputs one = Run(Args(variant, "arc", 1, dir_.Sub(variant + "1")), dir_.Sub(variant + "1"));
    ASSERT_TRUE(one.loss.defined() && one.grad_w.defined());
    EXPECT_GT(one.loss.item<float>(), 0);
    // Zero rows exactly outside S = N ∪ labels; here only classes outside S are zero.
    at::Tensor in_s = at::zeros({K_}, at::kBool);
    in_s.index_fill_(0, N_, true);
    in_s.index_fill_(0, Y_.masked_select(Y_ >= 0), true);
    for (int64_t c = 0; c < K_; ++c) {
      double norm = one.grad_w[c].abs().sum().item<double>();
      if (in_s[c].item<bool>()) {
        EXPECT_GT(norm, 0) << "class " << c;
      } else {
        EXPECT_EQ(norm, 0) << "class " << c;
      }
    }
    for (int world : {2, 3}) {
      std::string out = dir_.Sub(variant + std::to_string(world));
      Outputs many = Run(Args(variant, "arc", world, out), out);
      ASSERT_TRUE(many.loss.defined() && many.grad_w.defined());
      EXPECT_NEAR(many.loss.item<float>(), one.loss.item<float>(), 1e-5 * one.loss.item<float>())
          << world;
      EXPECT_TRUE(at::allclose(many.grad_e, one.grad_e, 1e-4, 1e-6)) << world;
      EXPECT_TRUE(at::allclose(many.grad_w, one.grad_w, 1e-4, 1e-6)) << world;
    }
  }
  for (std::string margin : {"cos", "none"}) {
    Outputs one = Run(Args("mlcd", margin, 1, dir_.Sub(margin + "1")), dir_.Sub(margin + "1"));
    Outputs two = Run(Args("mlcd", margin, 2, dir_.Sub(margin + "2")), dir_.Sub(margin + "2"));
    EXPECT_NEAR(two.loss.item<float>(), one.loss.item<float>(), 1e-5 * one.loss.item<float>())
        << margin;
    EXPECT_TRUE(at::allclose(two.grad_e, one.grad_e, 1e-4, 1e-6)) << margin;
    EXPECT_TRUE(at::allclose(two.grad_w, one.grad_w, 1e-4, 1e-6)) << margin;
  }
}

// --layer device (the ATen layer, here on CPU tensors) gives the host layer's outputs, alone
// and sharded over three processes.
TEST_F(LossCheckTest, DeviceLayerMatchesTheHostLayer) {
  for (std::string variant : {"mlcd", "mlc", "softmax"}) {
    SCOPED_TRACE(variant);
    const std::string host_out = dir_.Sub(variant + "-host");
    Outputs host = Run(Args(variant, "arc", 1, host_out), host_out);
    ASSERT_TRUE(host.loss.defined() && host.grad_w.defined());
    for (int world : {1, 3}) {
      const std::string out = dir_.Sub(variant + "-device" + std::to_string(world));
      std::vector<std::string> args = Args(variant, "arc", world, out);
      args.insert(args.end(), {"--layer", "device", "--device", "cpu"});
      Outputs device = Run(args, out);
      ASSERT_TRUE(device.loss.defined() && device.grad_w.defined());
      EXPECT_NEAR(device.loss.item<float>(), host.loss.item<float>(),
                  1e-5 * host.loss.item<float>())
          << world;
      EXPECT_TRUE(at::allclose(device.grad_e, host.grad_e, 1e-4, 1e-6)) << world;
      EXPECT_TRUE(at::allclose(device.grad_w, host.grad_w, 1e-4, 1e-6)) << world;
    }
  }
  std::vector<std::string> bad_layer = Args("mlcd", "arc", 1, dir_.Sub("bad-layer"));
  bad_layer.insert(bad_layer.end(), {"--layer", "gpu"});
  ExpectRejected(bad_layer, "expected host");
  std::vector<std::string> host_on_cuda = Args("mlcd", "arc", 1, dir_.Sub("host-cuda"));
  host_on_cuda.insert(host_on_cuda.end(), {"--device", "cuda"});
  ExpectRejected(host_on_cuda, "needs --layer device");
}

TEST_F(LossCheckTest, MoreRanksThanSamples) {
  // B = 2 over 3 ranks: one rank has no sample; K = 13 over 3 ranks.
  Save(dir_.Sub("E2.npy"), E_.narrow(0, 0, 2));
  Save(dir_.Sub("Y2.npy"), Y_.narrow(0, 0, 2));
  auto args = [&](int world, const std::string& out) {
    std::vector<std::string> a = Args("mlcd", "arc", world, out);
    a[2] = dir_.Sub("E2.npy");
    a[6] = dir_.Sub("Y2.npy");
    return a;
  };
  Outputs one = Run(args(1, dir_.Sub("b1")), dir_.Sub("b1"), 2);
  Outputs three = Run(args(3, dir_.Sub("b3")), dir_.Sub("b3"), 2);
  ASSERT_TRUE(one.loss.defined() && three.loss.defined());
  EXPECT_NEAR(three.loss.item<float>(), one.loss.item<float>(), 1e-5 * one.loss.item<float>());
  EXPECT_TRUE(at::allclose(three.grad_e, one.grad_e, 1e-4, 1e-6));
  EXPECT_TRUE(at::allclose(three.grad_w, one.grad_w, 1e-4, 1e-6));
}

TEST_F(LossCheckTest, BadInputsAreRejectedClearly) {
  const std::string out = dir_.Sub("bad");
  auto with = [&](int index, const std::string& value) {
    std::vector<std::string> a = Args("mlcd", "arc", 1, out);
    a[index] = value;
    return a;
  };
  Save(dir_.Sub("E64.npy"), E_.to(at::kDouble));
  ExpectRejected(with(2, dir_.Sub("E64.npy")), "expected float32");
  Save(dir_.Sub("Wd.npy"), at::randn({K_, D_ + 1}));
  ExpectRejected(with(4, dir_.Sub("Wd.npy")), "has dimension 6");
  at::Tensor big = Y_.clone();
  big[3][0] = K_;
  Save(dir_.Sub("Ybig.npy"), big);
  ExpectRejected(with(6, dir_.Sub("Ybig.npy")), "label 13 (row 3) is >= the number of classes 13");
  Save(dir_.Sub("Yrows.npy"), Y_.narrow(0, 0, 3));
  ExpectRejected(with(6, dir_.Sub("Yrows.npy")), "has 3 rows but --embeddings has 7");
  Save(dir_.Sub("Yf.npy"), Y_.to(at::kFloat));
  ExpectRejected(with(6, dir_.Sub("Yf.npy")), "expected int64");
  Save(dir_.Sub("Nbad.npy"), at::tensor(std::vector<int64_t>{1, 13}));
  ExpectRejected(with(8, dir_.Sub("Nbad.npy")), "class id 13 is outside [0, 13)");
  Save(dir_.Sub("N2d.npy"), N_.view({-1, 1}));
  ExpectRejected(with(8, dir_.Sub("N2d.npy")), "1-d array");
  at::Tensor zero = E_.clone();
  zero[2].zero_();
  Save(dir_.Sub("Ezero.npy"), zero);
  ExpectRejected(with(2, dir_.Sub("Ezero.npy")), "row 2 is all zeros");
  at::Tensor wzero = W_.clone();
  wzero[2].zero_();  // class 2 is a negative
  Save(dir_.Sub("Wzero.npy"), wzero);
  ExpectRejected(with(4, dir_.Sub("Wzero.npy")),
                 "class centre 2 is in the sampled set but all zeros");
  at::Tensor nan = E_.clone();
  nan[0][0] = NAN;
  Save(dir_.Sub("Enan.npy"), nan);
  ExpectRejected(with(2, dir_.Sub("Enan.npy")), "NaN");
  ExpectRejected(with(2, dir_.Sub("missing.npy")), "NOT_FOUND");
  ExpectRejected(with(10, "arcface"), "unknown loss variant 'arcface'");
  ExpectRejected(with(16, "angular"), "unknown margin type 'angular'");
  ExpectRejected(with(12, "-1"), "--scale");
  ExpectRejected(with(18, "0"), "--world-size");
  // A zero centre outside S is fine.
  at::Tensor unused = W_.clone();
  unused[12].zero_();
  Save(dir_.Sub("Wunused.npy"), unused);
  std::string log;
  bool used12 = (Y_ == 12).any().item<bool>();
  if (!used12) {
    EXPECT_EQ(RunCommand(BinPath("mlcd-worker"), with(4, dir_.Sub("Wunused.npy")), &log), 0) << log;
  }
}

}  // namespace
}  // namespace mlcd
