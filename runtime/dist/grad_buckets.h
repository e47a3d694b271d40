// Gradient buckets for data-parallel all-reduce, planned on the CPU from the compiled plan: the Grads region is cut
// at parameter boundaries into buckets of about `bucket_bytes`, and each bucket is issued right after the last
// node of a train program that touches (writes or reads) any gradient in it, so its all-reduce overlaps the rest of
// the backward pass. Every bucket must be reduced before the OptimizerStep node reads the gradients.
#pragma once
#include <cstdint>
#include <vector>

#include "core/compiler.h"

namespace trctl {

constexpr int64_t kDistDefaultBucketBytes = int64_t{25} << 20;  // PyTorch DDP's bucket_cap_mb default

struct GradBucket {
  int64_t begin = 0, end = 0;  // bytes of the Grads region, [begin, end), 256-aligned begin
  int64_t issue_after = -1;    // node index of the program after which the bucket is final; -1: no node touches it
                               // (issued just before the optimizer)
};

struct GradBucketPlan {
  std::vector<GradBucket> buckets;  // in issue order (by issue_after, then by offset)
  int64_t optimizer_node = -1;      // the OptimizerStep node (all buckets are joined before it)
};

// The buckets of train program `program`. The layout cut depends only on the plan (the same on every rank and for
// every program); the issue points on the program's node order.
GradBucketPlan grad_buckets_plan(const Compiled& c, int program, int64_t bucket_bytes = kDistDefaultBucketBytes);

}  // namespace trctl
