// Dumps the float64 CPU references of every activation (forward and backward, boundary points included) and every
// loss (value and gradient) for benchmarks/torch_check_ops.py, which recomputes them with PyTorch and compares.
// Writes into $TRCTL_TORCHDUMP_DIR when it is set (manifest.json + little-endian .bin files); without it the test
// only checks that every reference is finite. Run: TRCTL_TORCHDUMP_DIR=DIR test_ops "[torchdump]".
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/ops/activation/activation.h"
#include "runtime/ops/loss/loss.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

struct Dump {
  std::string dir;  // "" = do not write
  std::ostringstream manifest;
  bool first = true;

  template <class T>
  std::string file(const std::string& name, const std::vector<T>& v) {
    for (const T& e : v) CHECK(std::isfinite(static_cast<double>(e)));
    if (!dir.empty()) {
      std::ofstream f(dir + "/" + name, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
      REQUIRE(f.good());
    }
    return "\"" + name + "\"";
  }
  void entry(const std::string& json) {
    manifest << (first ? "\n  " : ",\n  ") << json;
    first = false;
  }
  void finish() {
    if (dir.empty()) return;
    std::ofstream f(dir + "/manifest.json");
    f << "{\"format\": \"trctl-torchdump/1\", \"entries\": [" << manifest.str() << "\n]}\n";
    REQUIRE(f.good());
  }
};

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

TEST_CASE("float64 references of every activation and loss, dumped for the PyTorch check", "[torchdump]") {
  Dump d;
  if (const char* dir = std::getenv("TRCTL_TORCHDUMP_DIR")) d.dir = dir;
  const ActKind kinds[] = {ActKind::Relu6, ActKind::LeakyRelu, ActKind::Elu,    ActKind::Silu,
                           ActKind::Hardswish, ActKind::Sigmoid, ActKind::Tanh};
  for (ActKind k : kinds) {
    for (double param : {0.01, 0.2, 1.0, 0.5}) {
      if (k == ActKind::LeakyRelu ? (param == 1.0 || param == 0.5) : k == ActKind::Elu ? param < 0.5 : param != 0.01)
        continue;  // leaky_relu: 0.01, 0.2; elu: 1.0, 0.5; the others once
      std::vector<double> x = random_vec(256, 11, -8, 8);
      // PyTorch's boundary points: 0, -0, +-3, 6 and neighbours.
      const double edges[] = {0.0, -0.0, 3.0, -3.0, 6.0, 1e-7, -1e-7, 2.9999999, -3.0000001, 5.9999999, 6.0000001};
      x.insert(x.end(), std::begin(edges), std::end(edges));
      const int64_t n = static_cast<int64_t>(x.size());
      std::vector<double> dy = random_vec(x.size(), 12), y(x.size()), dx(x.size());
      activation_fwd_cpu(k, param, x.data(), y.data(), n);
      activation_grad_cpu(k, param, dy.data(), act_grad_uses_output(k) ? y.data() : x.data(), dx.data(), n);
      const std::string tag = std::string(to_string(k)) + "_p" + std::to_string(std::lround(param * 100));
      d.entry("{\"op\": \"activation\", \"kind\": \"" + std::string(to_string(k)) + "\", \"param\": " + num(param) +
              ", \"n\": " + std::to_string(n) + ", \"x\": " + d.file(tag + "_x.bin", x) + ", \"dy\": " +
              d.file(tag + "_dy.bin", dy) + ", \"y\": " + d.file(tag + "_y.bin", y) + ", \"dx\": " +
              d.file(tag + "_dx.bin", dx) + "}");
    }
  }
  struct LossCase {
    std::string name;
    LossFn fn;
    int64_t rows, width;
    double eps;
    std::vector<float> weights;
  };
  const LossCase cases[] = {
      {"bce_binary", LossFn::BceWithLogits, 64, 1, 0, {}},
      {"bce_onehot", LossFn::BceWithLogits, 64, 10, 0, {}},
      {"mse", LossFn::Mse, 64, 10, 0, {}},
      {"wce", LossFn::WeightedCrossEntropy, 64, 10, 0, {1, 2, 0.5f, 1, 3, 1, 0.25f, 1, 1.5f, 0}},
      {"wce_smooth", LossFn::WeightedCrossEntropy, 64, 10, 0.1, {1, 2, 0.5f, 1, 3, 1, 0.25f, 1, 1.5f, 0}},
      {"wce_smooth_uniform", LossFn::WeightedCrossEntropy, 64, 10, 0.2, std::vector<float>(10, 1.0f)},
  };
  for (const LossCase& lc : cases) {
    std::vector<double> x = random_vec(static_cast<size_t>(lc.rows * lc.width), 21, -5, 5);
    std::vector<int32_t> y(static_cast<size_t>(lc.rows));
    const int32_t hi = lc.width == 1 ? 2 : static_cast<int32_t>(lc.width);
    for (int64_t r = 0; r < lc.rows; ++r) y[r] = static_cast<int32_t>((r * 7 + 3) % hi);
    LossDesc desc{lc.fn, lc.rows, lc.width, lc.eps, lc.weights.empty() ? nullptr : lc.weights.data()};
    const double loss = loss_fwd_cpu(desc, x.data(), y.data());
    std::vector<double> g(x.size());
    loss_grad_cpu(desc, x.data(), y.data(), g.data(), 1.0);
    std::string w = "[";
    for (size_t i = 0; i < lc.weights.size(); ++i) w += (i ? ", " : "") + num(lc.weights[i]);
    w += "]";
    d.entry("{\"op\": \"loss\", \"name\": \"" + lc.name + "\", \"fn\": \"" + to_string(lc.fn) + "\", \"rows\": " +
            std::to_string(lc.rows) + ", \"width\": " + std::to_string(lc.width) + ", \"label_smoothing\": " +
            num(lc.eps) + ", \"class_weights\": " + w + ", \"loss\": " + num(loss) + ", \"x\": " +
            d.file(lc.name + "_x.bin", x) + ", \"labels\": " + d.file(lc.name + "_labels.bin", y) +
            ", \"dx\": " + d.file(lc.name + "_dx.bin", g) + "}");
    CHECK(std::isfinite(loss));
  }
  d.finish();
  if (d.dir.empty()) WARN("TRCTL_TORCHDUMP_DIR not set: references computed and checked finite, nothing written");
}
