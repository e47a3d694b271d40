// The non-finite gradient check of a train program (train.grad_check): which byte ranges of the Grads region the
// check before the optimizer reads, and which linear weight gradients are checked through their operands instead.
//
// Why an operand check decides the same: under fp16 AMP a linear weight gradient dW (M, K) f32 = dY^T (M, R) X (R, K)
// is computed from fp16 operands with fp32 accumulation (cuBLASLt, CUBLAS_COMPUTE_32F, fp32 split-K partials).
//   - dY and X finite: every product is at most 65504^2 < 4.3e9 in magnitude, a sum of R of them at most R * 4.3e9,
//     finite in f32 for any R below 7.9e28 -- so dW is finite.
//   - dY[r][m] (or X[r][k]) inf or NaN: every dW[m][k'] (every dW[m'][k]) has the term dY[r][m] X[r][k'], inf or NaN
//     (inf * 0 is NaN), and a sum with an inf or NaN term is inf or NaN -- so dW has a non-finite element.
// So "dW has a non-finite element" is exactly "dY or X has one", and the step's found_inf flag (which only ever gets
// set) ends the same. bf16 (products overflow f32) and fp32 operands are not covered: their gradients are read.
// Where it pays: VGG16-BN's classifier, 123.6 M of its 138.4 M gradients (495 MB of f32) against 22 MB of fp16
// operands.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/graph/ir.h"
#include "core/memplan/memplan.h"
#include "core/spec/spec.h"

namespace trctl {

// A LinearGradWeight node whose gradient is checked through its operands, right after it runs.
struct GradCheckOperands {
  size_t node = 0;             // index in the program
  ValueId dy = kNoValue;       // in[0] (R, M), stored fp16
  ValueId x = kNoValue;        // in[1] (R, K), stored fp16
  ValueId grad = kNoValue;     // out[0] (M, K) f32: a Role::Grad value the check before the optimizer skips
};

struct GradCheckPlan {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // Grads bytes [begin, end) read by the check, ascending, merged
  std::vector<GradCheckOperands> operands;          // in node order
  int64_t skipped_bytes = 0;                        // Grads bytes the ranges leave out (the operand-checked ones)
  int64_t operand_bytes = 0;                        // bytes the operand checks read instead (fp16 dY and X)
};

// Whether a run may check through operands at all: train.grad_check auto, and neither ranks (the flag must see the
// averaged gradients) nor debug.inject_nonfinite_grad_steps (its NaN is written into the gradients). The backend
// and the run log both ask this.
bool grad_check_by_operands(const Spec& spec, bool distributed);

// The plan for program `program` (a train program with an optimizer): everything [0, m.trainable_bytes) when
// by_operands is false (grad_check_by_operands), else the operand check for every
// LinearGradWeight node where all of these hold: Graph::storage F16, train.accumulate_steps 1 (the flag is cleared
// per micro-batch), dY and X stored as fp16, dW a trainable parameter's own Role::Grad value that no other node of
// the program writes, and the operands' bytes under half the gradient's (the check reads less).
GradCheckPlan grad_check_plan(const Graph& g, const MemoryPlan& m, int program, bool by_operands);

}  // namespace trctl
