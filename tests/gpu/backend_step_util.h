// GPU test helper: a CUDA backend built from a spec (compiled with its AMP storage), started from params_init's
// weights and buffers_init's running statistics, and one host-fed step of its train program on a fixed random
// batch; the regions read back as floats and a named value's slice of one. For tests that compare one step of two
// backend configurations (a fusion against the separate path) gradient by gradient.
#pragma once
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/compile_util.h"

namespace trctl::gputest {

struct BuiltBackend {
  std::unique_ptr<Compiled> c;
  std::unique_ptr<Backend> be;
};

// yaml (a test's spec text, named `name` in messages) with overrides, parsed; the test fails on a parse error.
inline Spec parsed_spec(const char* yaml, const char* name, const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_parse(yaml, name, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

inline BuiltBackend build_backend(const Spec& s) {
  BuiltBackend b;
  b.c = std::make_unique<Compiled>(testing::compile_amp(s));
  Result<std::unique_ptr<Backend>> be = make_cuda_backend(*b.c, s.seed);
  INFO((be.ok() ? std::string() : be.error_text()));
  REQUIRE(be.ok());
  b.be = std::move(be.value());
  return b;
}

inline std::vector<float> floats_of(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

// Programs of c with a batch-norm backward.
inline int backward_programs(const Compiled& c) { return testing::programs_with(c.graph, OpKind::BatchNormGrad); }

// params_init's weights (seed 5) and buffers_init's running statistics written, the lr 0.05; returns the index of
// the train program.
inline int reset_for_steps(const BuiltBackend& b) {
  const Compiled& c = *b.c;
  REQUIRE(b.be->write_weights(floats_of(params_init(c, 5))).ok());
  REQUIRE(b.be->write_region(Region::Buffers, buffers_init(c)).ok());
  b.be->set_lr(0.05);
  int train = -1;
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") train = static_cast<int>(i);
  REQUIRE(train >= 0);
  return train;
}

// From params_init's weights (seed 5), one host-fed AMP step (f16 or bf16 input, as the backend takes it) of the
// train program on a fixed batch of images of sample_elems values each (uniform in [-1, 1], labels (7 i) % classes);
// returns its loss.
inline double one_train_step(const BuiltBackend& b, int64_t sample_elems, int classes = 10) {
  const Compiled& c = *b.c;
  const int train = reset_for_steps(b);
  const int64_t batch = c.graph.programs[train].batch;
  Rng rng(4242);
  const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * sample_elems), -1.0f, 1.0f);
  const OutDType in_type = b.be->host_input_dtype();  // the AMP type: f16 or bf16 (run 74: bf16 was refused here)
  REQUIRE((in_type == OutDType::F16 || in_type == OutDType::BF16));
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    h[i] = in_type == OutDType::F16 ? f32_to_f16_bits(x[i]) : f32_to_bf16_bits(x[i]);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % classes);
  Status st = b.be->load_batch(train, 0, h.data(), y.data(), batch);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  st = b.be->run(train, 0);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  REQUIRE(b.be->synchronize().ok());
  return b.be->last_loss(train);
}

// The slice of `region` (plan layout, as floats) that the value named `name` occupies.
inline std::vector<float> value_slice(const Compiled& c, const std::vector<float>& region, const std::string& name) {
  for (size_t v = 0; v < c.graph.values.size(); ++v)
    if (c.graph.values[v].name == name) {
      const Placement& pl = c.plan.values[v];
      const size_t at = static_cast<size_t>(pl.offset / 4), n = static_cast<size_t>(pl.bytes / 4);
      REQUIRE(at + n <= region.size());
      return std::vector<float>(region.begin() + static_cast<std::ptrdiff_t>(at),
                                region.begin() + static_cast<std::ptrdiff_t>(at + n));
    }
  FAIL("no value " << name);
  return {};
}

}  // namespace trctl::gputest
