// Training checkpoints: DIR/weights.safetensors (one tensor per parameter) and DIR/state.bin (versioned,
// CRC32-checked optimizer moments and training position). Both are written atomically and carry the spec hash
// and the step, so a mismatched pair (a crash between the two renames) is detected. Layout: docs/checkpoint.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ckpt/atomic_file.h"
#include "core/compiler.h"
#include "core/util/error.h"

namespace trctl {

constexpr char kStateMagic[] = "TRCTLST1";  // 8 bytes on disk (no terminator)
constexpr uint32_t kStateVersion = 2;  // 2 added opt_updates; version 1 files are still read
constexpr char kCkptWeightsFile[] = "weights.safetensors";
constexpr char kCkptStateFile[] = "state.bin";
constexpr char kCkptPartialSuffix[] = ".partial";  // a checkpoint being written: DIR.partial, renamed to DIR

// Everything besides the regions that a resumed run needs to continue bit-for-bit.
struct TrainState {
  int64_t step = 0;               // optimizer steps taken (Backend::step())
  int64_t epoch = 0;              // epochs completed
  float loss_scale = 1.0f;        // dynamic loss scaling (fp16): current scale
  int32_t loss_scale_growth = 0;  // ... and good steps since the last change
  uint64_t seed = 0;              // the run's RNG seed
  int64_t data_epoch = 0;         // data order position: the epoch whose sample order is in use
  int64_t data_batch = 0;         // ... and the index of the next batch in it
  // Optimizer updates applied (torch's state['step'], Adam's bias corrections): fp16 AMP skips the update of a
  // step with non-finite gradients, so it can be below `step`. -1: equal to step (version-1 files, fp32 runs).
  int64_t opt_updates = -1;
  int64_t updates() const { return opt_updates < 0 ? step : opt_updates; }
  bool operator==(const TrainState& o) const;
};

struct Checkpoint {
  std::vector<std::byte> weights;    // the Weights region (plan layout; padding zero)
  std::vector<std::byte> opt_state;  // the OptState region (empty vector of zeros when weights_only)
  std::vector<std::byte> buffers;    // the Buffers region (batch-norm running statistics; saved with the weights)
  TrainState state;
};

struct CkptLoadOptions {
  // Load the weights of a checkpoint saved with another spec (same parameter names, shapes and dtypes); the
  // optimizer state and TrainState are not read (fresh optimizer, default TrainState).
  bool weights_only = false;
};

// FNV-1a 64 of spec_to_yaml(spec) with the `run` section (output dir, name, logging), train.checkpoint_every,
// checkpoint_every_steps, keep_last, keep_best and debug.fail_checkpoint_write reset: everything that changes the
// computation is hashed, where and how often outputs go is not.
uint64_t ckpt_spec_hash(const Spec& spec);

// Writes DIR/state.bin then DIR/weights.safetensors (creating DIR). `weights`, `opt_state` and `buffers` are
// whole regions of c.plan (Backend::read_region); the buffers (running statistics) go into weights.safetensors
// beside the parameters, as in a PyTorch state_dict. `io` is passed to both atomic writes (fault injection).
Status ckpt_save(const std::string& dir, const Compiled& c, const std::vector<std::byte>& weights,
                 const std::vector<std::byte>& opt_state, const TrainState& state,
                 const AtomicWriteOptions& io = {}, const std::vector<std::byte>& buffers = {});

// state.bin read without a compiled plan (trctl export): the TrainState, the saved spec hash, and each
// parameter's optimizer slots in file order (for an EMA run the slot after the moments is the average).
struct CkptStateFile {
  TrainState state;
  uint64_t spec_hash = 0;
  std::map<std::string, std::vector<std::vector<std::byte>>> slots;  // parameter name -> slots' bytes
  std::map<std::string, std::vector<std::vector<int64_t>>> slot_shapes;
  std::map<std::string, std::vector<DType>> slot_dtypes;
};
Result<CkptStateFile> ckpt_read_state(const std::string& path);

// Reads a checkpoint for `c`: every parameter present with c's shape and dtype, no extra ones, the same spec hash
// (unless weights_only), state.bin's magic, version and checksum. All mismatches are reported at once.
Result<Checkpoint> ckpt_load(const std::string& dir, const Compiled& c, const CkptLoadOptions& opt = {});

}  // namespace trctl
