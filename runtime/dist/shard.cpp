// dist_shard_order: padded, strided shards of an epoch order (see shard.h).
#include "runtime/dist/shard.h"

#include <stdexcept>

namespace trctl {

int64_t dist_shard_size(int64_t n, int world_size) {
  if (world_size < 1) throw std::logic_error("dist_shard_size: world size below 1");
  return (n + world_size - 1) / world_size;
}

std::vector<int64_t> dist_shard_order(const std::vector<int64_t>& order, int rank, int world_size) {
  if (rank < 0 || rank >= world_size) throw std::logic_error("dist_shard_order: rank outside the world");
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t per = dist_shard_size(n, world_size);
  std::vector<int64_t> shard;
  if (n == 0) return shard;
  shard.reserve(static_cast<size_t>(per));
  for (int64_t k = 0; k < per; ++k) {
    const int64_t pos = rank + k * world_size;  // a position of the padded order [order..., order[0], order[1], ...]
    shard.push_back(order[static_cast<size_t>(pos % n)]);
  }
  return shard;
}

}  // namespace trctl
