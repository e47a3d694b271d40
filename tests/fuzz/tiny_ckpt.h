// A tiny compiled MLP and a checkpoint of it (weights.safetensors and state.bin bytes), shared by fuzz_ckpt
// (the valid half of each input pair) and gen_corpus (the seeds).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/ckpt/atomic_file.h"
#include "core/ckpt/checkpoint.h"
#include "core/compiler.h"
#include "tests/support/mlp_spec.h"

namespace trctl::fuzz {

struct TinyCheckpoint {
  Compiled compiled;
  std::vector<std::byte> weights_file, state_file;
};

// flatten -> linear 4 -> relu -> linear 3 on 4x4x1 inputs, AdamW; regions filled with a byte pattern, saved with
// ckpt_save into a scratch directory that is removed again.
inline TinyCheckpoint tiny_checkpoint() {
  TinyCheckpoint t;
  Result<Compiled> c = compile_spec(testing::mlp_spec(4, 2), testing::small_data(8, 4));
  if (!c.ok()) std::abort();
  t.compiled = std::move(c.value());
  const MemoryPlan& plan = t.compiled.plan;
  auto region = [&](Region r, unsigned seed) {
    std::vector<std::byte> b(size_t(plan.region_bytes[static_cast<int>(r)]));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte((i * 37 + seed) & 0x3f);  // small finite floats' bytes
    return b;
  };
  TrainState st;
  st.step = 12;
  st.epoch = 3;
  st.seed = 7;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trctl_fuzz_ckpt_" + std::to_string(::getpid()));
  if (!ckpt_save(dir.string(), t.compiled, region(Region::Weights, 1), region(Region::OptState, 2), st,
                 AtomicWriteOptions{-1, 0, false, false}, region(Region::Buffers, 3))
           .ok())
    std::abort();
  t.weights_file = file_read_bytes((dir / kCkptWeightsFile).string()).value();
  t.state_file = file_read_bytes((dir / kCkptStateFile).string()).value();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return t;
}

}  // namespace trctl::fuzz
