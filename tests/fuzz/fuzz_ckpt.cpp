// libFuzzer target: the checkpoint readers (core/ckpt): safetensors_decode and ckpt_load (weights.safetensors +
// state.bin for a tiny compiled MLP). Input: one mode byte, then the bytes under test:
//   mode % 4 == 0: a safetensors file, decoded from memory;
//   mode % 4 == 1: state.bin as a whole, beside a valid weights.safetensors;
//   mode % 4 == 2: state.bin's payload; the harness adds a valid header (version 1 or 2 from bit 2) and CRC32,
//                  so mutations reach the record parser behind the checksum;
//   mode % 4 == 3: weights.safetensors, beside a valid state.bin.
// The checkpoint directory holds symlinks to two memfds: nothing is written to disk per input. Asserts: every
// call returns a value or errors, never crashes; a decoded safetensors file's tensors hold numel * dtype-size
// bytes; a checkpoint that loads has regions of the plan's sizes.
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/ckpt/safetensors.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/tiny_ckpt.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_ckpt: %s\n", what);
  std::abort();
}

// The tiny checkpoint and a directory of symlinks to the memfds; removed at exit.
struct Harness {
  fuzz::TinyCheckpoint ck = fuzz::tiny_checkpoint();
  fuzz::MemFile weights{"fuzz_ckpt_weights"}, state{"fuzz_ckpt_state"};
  fs::path dir = fs::temp_directory_path() / ("trctl_fuzz_ckpt_dir_" + std::to_string(::getpid()));
  Harness() {
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    fs::create_symlink(weights.path(), dir / kCkptWeightsFile);
    fs::create_symlink(state.path(), dir / kCkptStateFile);
  }
  ~Harness() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::vector<std::byte> as_bytes(const uint8_t* p, size_t n) {
  std::vector<std::byte> b(n);
  if (n) std::memcpy(b.data(), p, n);
  return b;
}

void put_le(std::vector<std::byte>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(std::byte((v >> (8 * i)) & 0xff));
}

// state.bin around a payload: magic, version, reserved, length, payload, CRC32 of all before it.
std::vector<std::byte> wrap_state(const uint8_t* payload, size_t n, uint32_t version) {
  std::vector<std::byte> b;
  for (int i = 0; i < 8; ++i) b.push_back(std::byte(kStateMagic[i]));
  put_le(b, version, 4);
  put_le(b, 0, 4);
  put_le(b, n, 8);
  const std::vector<std::byte> p = as_bytes(payload, n);
  b.insert(b.end(), p.begin(), p.end());
  put_le(b, crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()), uInt(b.size())), 4);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness h;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const uint8_t* body = data + 1;
  const size_t n = size - 1;

  if (mode % 4 == 0) {
    Result<SafetensorsFile> f = safetensors_decode(as_bytes(body, n), "fuzz.safetensors");
    if (!f.ok()) return 0;
    for (const TensorView& t : f->tensors) {
      size_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) fail("negative dimension accepted");
        numel *= size_t(d);
      }
      if (t.data.size() != numel * size_t(dtype_size(t.dtype))) fail("tensor bytes != numel * dtype size");
    }
    return 0;
  }
  std::vector<std::byte> weights = h.ck.weights_file, state = h.ck.state_file;
  if (mode % 4 == 1) state = as_bytes(body, n);
  if (mode % 4 == 2) state = wrap_state(body, n, (mode & 4) ? 1 : 2);
  if (mode % 4 == 3) weights = as_bytes(body, n);
  h.weights.set(reinterpret_cast<const uint8_t*>(weights.data()), weights.size());
  h.state.set(reinterpret_cast<const uint8_t*>(state.data()), state.size());

  for (bool weights_only : {false, true}) {
    Result<Checkpoint> c = ckpt_load(h.dir.string(), h.ck.compiled, CkptLoadOptions{weights_only});
    if (!c.ok()) continue;
    const MemoryPlan& plan = h.ck.compiled.plan;
    if (c->weights.size() != size_t(plan.region_bytes[static_cast<int>(Region::Weights)]) ||
        c->opt_state.size() != size_t(plan.region_bytes[static_cast<int>(Region::OptState)]))
      fail("loaded regions do not match the plan");
  }
  return 0;
}
