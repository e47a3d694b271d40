// grad_check_plan: the train program's non-finite check, as byte ranges of Grads and operand checks
// (core/memplan/grad_check.h says why an operand check decides the same).
#include "core/memplan/grad_check.h"

#include <algorithm>

namespace trctl {

namespace {

// Rows of the reduction below which an fp16 x fp16 sum in f32 cannot overflow: R * 65504^2 < FLT_MAX (3.4e38) for
// R < 7.9e28; any tensor is far below this bound, kept as a stated limit rather than assumed.
constexpr int64_t kMaxReductionRows = int64_t{1} << 62;

bool stored_fp16(const Graph& g, ValueId v) { return stored_bytes(g, v) == g.values[v].shape.numel() * 2; }

}  // namespace

bool grad_check_by_operands(const Spec& spec, bool distributed) {
  return spec.train.grad_check == GradCheck::Auto && !distributed && spec.debug.inject_nonfinite_grad_steps.empty();
}

GradCheckPlan grad_check_plan(const Graph& g, const MemoryPlan& m, int program, bool by_operands) {
  GradCheckPlan out;
  const Program& p = g.programs[static_cast<size_t>(program)];
  std::vector<std::pair<int64_t, int64_t>> skip;  // Grads byte ranges checked through operands
  if (by_operands && g.storage == DType::F16 && g.accumulate_steps == 1 && p.kind == ProgramKind::Train && !p.micro) {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      const Node& n = p.nodes[i];
      if (n.op != OpKind::LinearGradWeight || n.in.size() < 2 || n.out.size() != 1) continue;
      const ValueId dy = n.in[0], x = n.in[1], dw = n.out[0];
      const Value& gv = g.values[dw];
      if (gv.role != Role::Grad || gv.dtype != DType::F32 || gv.param < 0) continue;
      if (g.params[static_cast<size_t>(gv.param)].frozen || !m.placed(dw)) continue;
      int writers = 0;
      for (const Node& o : p.nodes) writers += static_cast<int>(std::count(o.out.begin(), o.out.end(), dw));
      if (writers != 1) continue;
      if (!stored_fp16(g, dy) || !stored_fp16(g, x)) continue;
      const int64_t rows = g.values[dy].shape.numel() / std::max<int64_t>(1, g.values[dy].shape.dims.back());
      if (rows >= kMaxReductionRows) continue;
      const int64_t operand_bytes = stored_bytes(g, dy) + stored_bytes(g, x), grad_bytes = m.values[dw].bytes;
      if (2 * operand_bytes >= grad_bytes) continue;  // reading the gradient is as cheap
      out.operands.push_back({i, dy, x, dw});
      out.operand_bytes += operand_bytes;
      const int64_t begin = m.values[dw].offset;
      skip.emplace_back(begin, std::min(m.trainable_bytes, align_up(begin + grad_bytes)));  // the zero padding too
    }
  }
  std::sort(skip.begin(), skip.end());
  int64_t at = 0;
  for (const auto& [b, e] : skip) {
    if (b > at) out.ranges.emplace_back(at, b);
    out.skipped_bytes += e - std::max(b, at);
    at = std::max(at, e);
  }
  if (at < m.trainable_bytes) out.ranges.emplace_back(at, m.trainable_bytes);
  return out;
}

}  // namespace trctl
