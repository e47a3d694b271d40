// Sample sharding for data parallelism (DistributedSampler semantics, padded): disjoint strided shards that
// cover the epoch, the same size on every rank.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "dataio/loader.h"
#include "runtime/dist/shard.h"

using namespace trctl;

TEST_CASE("every rank gets ceil(n / N) samples") {
  CHECK(dist_shard_size(10, 4) == 3);
  CHECK(dist_shard_size(12, 4) == 3);
  CHECK(dist_shard_size(3, 4) == 1);
  CHECK(dist_shard_size(0, 4) == 0);
  CHECK(dist_shard_size(60000, 1) == 60000);
}

TEST_CASE("world size 1 keeps the epoch order unchanged") {
  const auto order = loader_epoch_order(1000, true, 5, 3);
  CHECK(dist_shard_order(order, 0, 1) == order);
}

TEST_CASE("shards of a divisible epoch are disjoint and cover it exactly") {
  for (int world : {2, 4, 8}) {
    const auto order = loader_epoch_order(1024, true, 11, 2);
    std::multiset<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      const auto s = dist_shard_order(order, r, world);
      CHECK(static_cast<int64_t>(s.size()) == 1024 / world);
      seen.insert(s.begin(), s.end());
    }
    CHECK(seen.size() == 1024);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 1024);
  }
}

TEST_CASE("an indivisible epoch is padded by wrapping: all samples covered, fewer than N repeated") {
  const int64_t n = 1003;
  const int world = 4;
  const auto order = loader_epoch_order(n, true, 11, 2);
  std::multiset<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    const auto s = dist_shard_order(order, r, world);
    CHECK(static_cast<int64_t>(s.size()) == 251);
    seen.insert(s.begin(), s.end());
  }
  const std::set<int64_t> distinct(seen.begin(), seen.end());
  CHECK(static_cast<int64_t>(distinct.size()) == n);  // every sample
  CHECK(static_cast<int64_t>(seen.size()) == 251 * world);
  // the padding repeats the first 1004 - 1003 = 1 sample(s) of the order
  CHECK(seen.count(order[0]) == 2);
  CHECK(seen.count(order[1]) == 1);
}

TEST_CASE("shards are strided over the (seed, epoch) order, as DistributedSampler") {
  const auto order = loader_epoch_order(20, true, 1, 1);
  const auto s = dist_shard_order(order, 1, 3);
  REQUIRE(s.size() == 7);
  for (size_t k = 0; k < s.size(); ++k) CHECK(s[k] == order[(1 + 3 * k) % 20]);
  CHECK(dist_shard_order(order, 1, 3) != dist_shard_order(loader_epoch_order(20, true, 1, 2), 1, 3));
}

TEST_CASE("a split smaller than the world still gives every rank one sample") {
  const auto order = loader_epoch_order(3, true, 1, 1);
  for (int r = 0; r < 8; ++r) CHECK(dist_shard_order(order, r, 8).size() == 1);
}
