// Data-parallel sample sharding (torch DistributedSampler with drop_last=False): the (seed, epoch) order is padded
// by wrapping around to a multiple of the world size, and rank r takes positions r, r + N, r + 2N, ... of it. Every
// rank gets ceil(n / N) samples (so all ranks run the same number of steps, each collective on every rank), every
// sample is seen at least once per epoch, and at most N - 1 are seen twice.
#pragma once
#include <cstdint>
#include <vector>

namespace trctl {

// Samples per rank: ceil(n / world_size) (0 for an empty split).
int64_t dist_shard_size(int64_t n, int world_size);

// Rank `rank`'s shard of `order` (the epoch's permutation of the split), in the order it is visited.
std::vector<int64_t> dist_shard_order(const std::vector<int64_t>& order, int rank, int world_size);

}  // namespace trctl
