// The static MemoryPlan: every value of the graph gets a (region, offset). Persistent regions (weights, grads,
// optimizer state) are contiguous and share one layout, so "update all weights" is one pass with one index;
// inputs have two slots (A/B) for double buffering; activations share an arena by liveness; all offsets are
// 256-byte aligned. Pure data: printed, diffed and tested on the CPU.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/ir.h"
#include "core/util/error.h"

namespace trctl {

// Buffers: persistent non-trainable state (batch-norm running statistics), contiguous in graph.buffers order.
enum class Region : uint8_t { Weights, Grads, OptState, Inputs, Activations, Results, Hyper, Buffers };
constexpr int kRegionCount = 8;
const char* to_string(Region r);

constexpr int64_t kAlign = 256;
inline int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Bytes reserved for the backend's hyper-parameter block (learning rate, step, loss scale, ...).
constexpr int64_t kHyperBytes = 1024;  // the CUDA DeviceState: step scalars and 16 optimizer groups

struct Placement {
  Region region = Region::Activations;
  int64_t offset = -1;  // -1: not placed (a value no node touches)
  int64_t bytes = 0;
  int64_t first = -1, last = -1;  // liveness (global node positions) for activations
};

// A contiguous range of the weight layout that one optimizer parameter group owns (Graph::param_groups[group]).
struct UpdateRange {
  int64_t begin = 0, end = 0;  // bytes; end is aligned (the padding after a parameter is zero in weights and grads)
  int32_t group = 0;
};

struct MemoryPlan {
  std::vector<Placement> values;               // per ValueId
  std::array<int64_t, kRegionCount> region_bytes{};
  int64_t input_slot_bytes = 0;                // Inputs holds 2 slots of this size; slot s adds s * this
  std::vector<UpdateRange> update_ranges;      // the trainable parameters, group by group, from 0 to trainable_bytes
  int64_t trainable_bytes = 0;                 // [0, this) of Weights is updated (and has Grads); frozen ones after
  int64_t weights_bytes = 0;                   // one copy of the weight layout (Weights, each OptState copy)
  // Gradient accumulation (Role::GradAccum values): 0 = none; else Grads holds the gradients in [0, this) and their
  // accumulators at the same offsets plus this, in [this, 2 * this) (GradAccumulate is one pass over both).
  int64_t grad_accum_offset = 0;
  int64_t activation_naive_bytes = 0;          // sum of all activations without reuse
  int64_t total_bytes() const;
  bool placed(ValueId v) const { return values[v].offset >= 0; }
};

// Global position of node i of program p (programs are laid out one after the other).
std::vector<int64_t> program_bases(const Graph& g);

Result<MemoryPlan> memplan_build(const Graph& g);

// Alignment, bounds, and no two live activations overlapping; the same layout for weights/grads/state.
Status memplan_verify(const Graph& g, const MemoryPlan& m);

std::string memplan_dump(const Graph& g, const MemoryPlan& m);

// A backend that fuses the producer of `v` into an earlier node (index `at` of `program`) writes v before the
// plan defines it. Safe only if no other activation sharing v's storage is live from `at` to v's definition.
bool memplan_early_write_safe(const Graph& g, const MemoryPlan& m, int program, ValueId v, int64_t at);

}  // namespace trctl
