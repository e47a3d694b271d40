// The batch-norm backward folded into the few-channel weight gradient on the CUDA backend (fewc_bn_grad_choose,
// CudaBackend: the batch norm runs its first two passes, the stem's weight gradient computes dx while staging it):
// counted in conv_algo_sources() (run.json's conv_algorithms.bn_grad_folded) under fp16 AMP with conv_fewc on and
// not with conv_fewc forward; from the same weights and batch, one step's loss bitwise equal to conv_fewc forward's
// (the forward is the same), the stem's weight gradient close to its (cuDNN's weight gradient over the
// materialized dx, rounded to f16 before its fp32 copy: ~2^-11 relative per element, so 1e-2 norm-wise; a wrong
// dx, e.g. an unmasked ReLU or a dropped channel constant, is off by O(1)), every other gradient within the same
// bound, and two backends of one seed bitwise equal.
// The net: a 64-channel 3x3/1 RGB stem (the few-channel forward and weight gradient) whose batch norm + ReLU feeds
// only the next conv, so its backward dx is read only by the stem's weight gradient: VGG16-BN's features_0/1 shape.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/weights_diff.h"

using namespace trctl;

namespace {

const char* kYaml = R"(
seed: 11
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 40, width: 48, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn0}
    - {type: relu, name: relu0}
    - {type: conv2d, name: conv1, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 2, precision: fp16, device: cuda}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_parse(kYaml, "fewc_bn_grad.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

struct Built {
  std::unique_ptr<Compiled> c;
  std::unique_ptr<Backend> be;
};
Built build(const Spec& s) {
  Result<DataShape> d = data_shape(s);
  REQUIRE(d.ok());
  CompileOptions opt;
  opt.storage = amp_storage(s);
  Result<Compiled> c = compile_spec(s, d.value(), opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  Built b;
  b.c = std::make_unique<Compiled>(std::move(c.value()));
  Result<std::unique_ptr<Backend>> be = make_cuda_backend(*b.c, s.seed);
  INFO((be.ok() ? std::string() : be.error_text()));
  REQUIRE(be.ok());
  b.be = std::move(be.value());
  return b;
}

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

// From params_init's weights, one host-fed step of the train program on a fixed batch; returns its loss.
double one_step(const Built& b) {
  const Compiled& c = *b.c;
  REQUIRE(b.be->write_weights(floats(params_init(c, 5))).ok());
  REQUIRE(b.be->write_region(Region::Buffers, buffers_init(c)).ok());
  b.be->set_lr(0.05);
  int train = -1;
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") train = static_cast<int>(i);
  REQUIRE(train >= 0);
  const int64_t batch = c.graph.programs[train].batch, per = 40 * 48 * 3;
  gputest::Rng rng(4242);
  const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * per), -1.0f, 1.0f);
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = gputest::f32_to_f16_bits(x[i]);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 10);
  REQUIRE(b.be->host_input_dtype() == OutDType::F16);
  Status st = b.be->load_batch(train, 0, h.data(), y.data(), batch);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  st = b.be->run(train, 0);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  REQUIRE(b.be->synchronize().ok());
  return b.be->last_loss(train);
}

// The Grads-region slice of the value named `name` (plan layout).
std::vector<float> grad_of(const Compiled& c, const std::vector<float>& grads, const std::string& name) {
  for (size_t v = 0; v < c.graph.values.size(); ++v)
    if (c.graph.values[v].name == name) {
      const Placement& pl = c.plan.values[v];
      REQUIRE(pl.region == Region::Grads);
      const size_t at = static_cast<size_t>(pl.offset / 4), n = static_cast<size_t>(pl.bytes / 4);
      REQUIRE(at + n <= grads.size());
      return std::vector<float>(grads.begin() + static_cast<std::ptrdiff_t>(at),
                                grads.begin() + static_cast<std::ptrdiff_t>(at + n));
    }
  FAIL("no value " << name);
  return {};
}

}  // namespace

TEST_CASE("the stem batch norm's backward folds into the few-channel weight gradient: counted, repeatable, and "
          "the same gradients as the unfolded path (fp16 AMP)",
          "[gpu][backend][cnn][fewc]") {
  const Built on = build(spec_of({"train.conv_fewc=on"})), on2 = build(spec_of({"train.conv_fewc=on"}));
  const Built fwd = build(spec_of({"train.conv_fewc=forward"}));
  int backward = 0;
  for (const Program& p : on.c->graph.programs) {
    bool any = false;
    for (const Node& n : p.nodes) any |= n.op == OpKind::BatchNormGrad;
    backward += any;
  }
  REQUIRE(backward >= 1);
  CHECK(on.be->conv_algo_sources()->bn_grad_folded == backward);
  CHECK(fwd.be->conv_algo_sources()->bn_grad_folded == 0);
  const double la = one_step(on), la2 = one_step(on2), lr = one_step(fwd);
  CHECK(la == la2);
  CHECK(la == lr);  // the same forward
  const std::vector<float> ga = floats(on.be->read_region(Region::Grads)),
                           ga2 = floats(on2.be->read_region(Region::Grads)),
                           gr = floats(fwd.be->read_region(Region::Grads));
  CHECK(ga == ga2);  // one seed: bitwise
  for (const char* name : {"stem.weight.grad", "conv1.weight.grad", "bn0.weight.grad", "bn0.bias.grad"}) {
    const double r = testing::rel_diff(grad_of(*on.c, ga, name), grad_of(*fwd.c, gr, name));
    INFO(name << ": relative difference " << r << " to conv_fewc forward");
    CHECK(r < 1e-2);
  }
}
