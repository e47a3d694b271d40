// grad_buckets_plan: layout cut at parameter boundaries, then the last touching node of each bucket.
#include "runtime/dist/grad_buckets.h"

#include <algorithm>

namespace trctl {

GradBucketPlan grad_buckets_plan(const Compiled& c, int program, int64_t bucket_bytes) {
  GradBucketPlan r;
  const MemoryPlan& m = c.plan;
  const int64_t total = m.region_bytes[static_cast<int>(Region::Grads)];
  if (total <= 0) return r;
  // Parameter starts in layout order: the cut points a bucket may end at.
  std::vector<int64_t> starts;
  for (const ParamInfo& p : c.graph.params)
    if (p.grad != kNoValue && m.placed(p.grad)) starts.push_back(m.values[p.grad].offset);
  std::sort(starts.begin(), starts.end());
  starts.push_back(total);
  int64_t begin = 0;
  for (size_t i = 1; i < starts.size(); ++i) {
    if (starts[i] - begin >= bucket_bytes || i + 1 == starts.size()) {
      r.buckets.push_back({begin, starts[i], -1});
      begin = starts[i];
    }
  }
  if (r.buckets.empty()) r.buckets.push_back({0, total, -1});
  const Program& p = c.graph.programs[static_cast<size_t>(program)];
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& n = p.nodes[i];
    if (n.op == OpKind::OptimizerStep) {
      if (r.optimizer_node < 0) r.optimizer_node = static_cast<int64_t>(i);
      continue;
    }
    auto touch = [&](ValueId v) {
      if (v == kNoValue || !m.placed(v)) return;
      const Placement& pl = m.values[v];
      if (pl.region != Region::Grads) return;
      for (GradBucket& b : r.buckets)
        if (pl.offset < b.end && b.begin < pl.offset + pl.bytes) b.issue_after = static_cast<int64_t>(i);
    };
    for (ValueId v : n.in) touch(v);
    for (ValueId v : n.out) touch(v);
  }
  std::stable_sort(r.buckets.begin(), r.buckets.end(),
                   [](const GradBucket& a, const GradBucket& b) { return a.issue_after < b.issue_after; });
  return r;
}

}  // namespace trctl
