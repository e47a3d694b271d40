// Backend::request_loss / take_loss on the CUDA backend (the trainer's log lines read the loss this way, so the
// stream never drains for them): the loss requested behind step 1, taken after step 2 was launched, is bitwise the
// loss last_loss reads right after step 1 on a second backend of the same seed; repeated requests each return their
// own step's loss; a second take_loss returns the same value.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/gpu/backend_step_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

const char* kYaml = R"(
seed: 3
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 8, width: 8, channels: 1, classes: 10}
  batch_size: 16
model:
  layers:
    - {type: flatten, name: flatten}
    - {type: linear, name: fc1, out_features: 32}
    - {type: relu, name: r1}
    - {type: linear, name: fc2, out_features: 10}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
train: {epochs: 1, precision: fp32}
run: {progress: off}
)";

struct Built {
  BuiltBackend b;
  int train = -1;
};
Built build() {
  Result<Spec> s = spec_parse(kYaml, "loss_read.yaml");
  REQUIRE(s.ok());
  Built b{build_backend(s.value())};
  REQUIRE(b.b.be->write_weights(floats_of(params_init(*b.b.c, 5))).ok());
  b.b.be->set_lr(0.1);
  for (size_t i = 0; i < b.b.c->graph.programs.size(); ++i)
    if (b.b.c->graph.programs[i].name == "train") b.train = static_cast<int>(i);
  REQUIRE(b.train >= 0);
  return b;
}

// Launches step `k` (a fixed batch per k) without waiting for it.
void launch(const Built& b, int k) {
  const int64_t batch = b.b.c->graph.programs[b.train].batch;
  gputest::Rng rng(500 + static_cast<uint64_t>(k));
  const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * 64), 0.0f, 1.0f);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i + k) % 10);
  REQUIRE(b.b.be->host_input_dtype() == OutDType::F32);
  Status st = b.b.be->load_batch(b.train, k % 2, x.data(), y.data(), batch);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  st = b.b.be->run(b.train, k % 2);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
}

}  // namespace

TEST_CASE("request_loss / take_loss return the requested step's loss while later steps are queued",
          "[gpu][backend]") {
  const Built a = build(), ref = build();
  std::vector<double> want;  // the loss of steps 0..3, each read right after its step
  for (int k = 0; k < 4; ++k) {
    launch(ref, k);
    want.push_back(ref.b.be->last_loss(ref.train));
  }
  launch(a, 0);
  a.b.be->request_loss(a.train);
  launch(a, 1);  // queued behind the copy
  CHECK(a.b.be->take_loss() == want[0]);
  a.b.be->request_loss(a.train);  // step 1's
  launch(a, 2);
  launch(a, 3);
  CHECK(a.b.be->take_loss() == want[1]);
  CHECK(a.b.be->take_loss() == want[1]);  // taken again: the same value
  CHECK(a.b.be->last_loss(a.train) == want[3]);
}
