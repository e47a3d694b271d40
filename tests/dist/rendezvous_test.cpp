// DistEnv parsing and the TCP rendezvous on the loopback interface (ranks as threads, rank 0 on an ephemeral port).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/rendezvous.h"

using namespace trctl;

namespace {

Result<DistEnv> parse(const std::map<std::string, std::string>& vars) {
  return dist_env_parse([&](const char* k) -> const char* {
    auto it = vars.find(k);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string all_errors(const Result<DistEnv>& r) { return r.ok() ? "" : r.error_text(); }

std::vector<uint8_t> test_blob() {
  std::vector<uint8_t> b(128);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

struct RankResult {
  bool ok = false;
  std::vector<uint8_t> blob;
  std::string error;
  bool barrier_ok = false;
};

// Runs a whole job of `world` ranks as threads; rank k may be given its own world size and hash.
std::vector<RankResult> run_job(int world, std::vector<int> worlds, std::vector<uint64_t> hashes, double timeout_s,
                                bool with_barrier) {
  auto listener = RendezvousListener::open(0);
  REQUIRE(listener.ok());
  const int port = listener.value()->port();
  std::vector<RankResult> res(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      RendezvousOptions o;
      o.addr = "127.0.0.1";
      o.port = port;
      o.rank = r;
      o.world_size = worlds[static_cast<size_t>(r)];
      o.job_hash = hashes[static_cast<size_t>(r)];
      o.timeout_s = timeout_s;
      RankResult& out = res[static_cast<size_t>(r)];
      Result<std::unique_ptr<Rendezvous>> rv = r == 0 ? Rendezvous::serve(*listener.value(), o, test_blob())
                                                      : Rendezvous::join(o, &out.blob);
      out.ok = rv.ok();
      if (!rv.ok()) {
        out.error = rv.error_text();
        return;
      }
      if (r == 0) out.blob = test_blob();
      if (with_barrier) out.barrier_ok = rv.value()->barrier().ok() && rv.value()->barrier().ok();
    });
  for (auto& t : threads) t.join();
  return res;
}

}  // namespace

TEST_CASE("no distributed variables means a plain single-process run") {
  Result<DistEnv> e = parse({});
  REQUIRE(e.ok());
  CHECK_FALSE(e->enabled);
  CHECK(e->world_size == 1);
}

TEST_CASE("the torchrun variables are parsed") {
  Result<DistEnv> e = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                             {"MASTER_PORT", "29500"}, {"TRCTL_DIST_TIMEOUT_S", "12.5"},
                             {"TRCTL_DIST_BUCKET_MB", "0.5"}});
  REQUIRE(e.ok());
  CHECK(e->enabled);
  CHECK(e->rank == 3);
  CHECK(e->world_size == 4);
  CHECK(e->local_rank == 1);
  CHECK(e->master_addr == "node7");
  CHECK(e->master_port == 29500);
  CHECK(e->timeout_s == 12.5);
  CHECK(e->bucket_bytes == 512 * 1024);
}

TEST_CASE("world size 1 needs no port and LOCAL_RANK defaults to RANK") {
  Result<DistEnv> e = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  REQUIRE(e.ok());
  CHECK(e->enabled);
  CHECK(e->local_rank == 0);
  CHECK(e->master_port == 0);
  CHECK(e->master_addr == "127.0.0.1");
}

TEST_CASE("malformed distributed variables are all reported at once") {
  Result<DistEnv> e = parse({{"RANK", "x1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}, {"MASTER_PORT", "70000"}});
  REQUIRE_FALSE(e.ok());
  CHECK(e.errors().size() == 3);
  const std::string t = all_errors(e);
  CHECK_THAT(t, Catch::Contains("RANK: 'x1' is not an integer"));
  CHECK_THAT(t, Catch::Contains("LOCAL_RANK: '-1'"));
  CHECK_THAT(t, Catch::Contains("MASTER_PORT: '70000'"));
  for (const Error& err : e.errors()) CHECK(err.code == ErrCode::Invalid);
}

TEST_CASE("inconsistent distributed variables are refused") {
  CHECK_THAT(all_errors(parse({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}})),
             Catch::Contains("RANK=4 is not below WORLD_SIZE=4"));
  CHECK_THAT(all_errors(parse({{"RANK", "1"}, {"MASTER_PORT", "1234"}})), Catch::Contains("WORLD_SIZE: unset"));
  CHECK_THAT(all_errors(parse({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}})), Catch::Contains("RANK: unset"));
  CHECK_THAT(all_errors(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}})), Catch::Contains("MASTER_PORT: unset"));
  CHECK_THAT(all_errors(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"MASTER_PORT", "9"}})),
             Catch::Contains("LOCAL_RANK=2 is not below WORLD_SIZE=2"));
  CHECK_THAT(all_errors(parse({{"TRCTL_DIST_TIMEOUT_S", "0"}})), Catch::Contains("TRCTL_DIST_TIMEOUT_S"));
  CHECK_THAT(all_errors(parse({{"TRCTL_DIST_BUCKET_MB", "-1"}})), Catch::Contains("TRCTL_DIST_BUCKET_MB"));
}

TEST_CASE("rendezvous on loopback hands rank 0's blob to every rank, and barriers pass") {
  for (int world : {1, 2, 4}) {
    INFO("world size " << world);
    auto res = run_job(world, std::vector<int>(static_cast<size_t>(world), world),
                       std::vector<uint64_t>(static_cast<size_t>(world), 42), 10, true);
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << ": " << res[static_cast<size_t>(r)].error);
      CHECK(res[static_cast<size_t>(r)].ok);
      CHECK(res[static_cast<size_t>(r)].blob == test_blob());
      CHECK(res[static_cast<size_t>(r)].barrier_ok);
    }
  }
}

TEST_CASE("rendezvous_run: rank 0 makes the blob, the others receive it") {
  auto probe = RendezvousListener::open(0);  // find a free port, then release it for rank 0
  REQUIRE(probe.ok());
  const int port = probe.value()->port();
  probe.value().reset();
  std::vector<std::vector<uint8_t>> got(3);
  std::vector<bool> ok(3);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      RendezvousOptions o;
      o.port = port;
      o.rank = r;
      o.world_size = 3;
      o.job_hash = 7;
      o.timeout_s = 10;
      auto rv = rendezvous_run(o, [] { return Result<std::vector<uint8_t>>(test_blob()); }, &got[r]);
      ok[r] = rv.ok();
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < 3; ++r) {
    CHECK(ok[r]);
    CHECK(got[r] == test_blob());
  }
}

TEST_CASE("a rank with another world size is refused with a clear message") {
  auto res = run_job(2, {2, 3}, {42, 42}, 10, false);
  CHECK_FALSE(res[0].ok);
  CHECK_FALSE(res[1].ok);
  CHECK_THAT(res[1].error, Catch::Contains("refused this rank"));
  CHECK_THAT(res[1].error, Catch::Contains("WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"));
  CHECK_THAT(res[0].error, Catch::Contains("WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"));
}

TEST_CASE("a rank of another job (spec hash) is refused with a clear message") {
  auto res = run_job(2, {2, 2}, {42, 43}, 10, false);
  CHECK_FALSE(res[0].ok);
  CHECK_FALSE(res[1].ok);
  CHECK_THAT(res[1].error, Catch::Contains("runs a different job"));
  CHECK_THAT(res[1].error, Catch::Contains("same config with the same overrides"));
}

TEST_CASE("without rank 0 the other ranks time out with a clear error within the deadline") {
  auto probe = RendezvousListener::open(0);
  REQUIRE(probe.ok());
  const int port = probe.value()->port();
  probe.value().reset();  // nobody listens there now
  RendezvousOptions o;
  o.port = port;
  o.rank = 1;
  o.world_size = 2;
  o.timeout_s = 1.0;
  std::vector<uint8_t> blob;
  const auto t0 = std::chrono::steady_clock::now();
  auto rv = Rendezvous::join(o, &blob);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(rv.ok());
  CHECK_THAT(rv.error_text(), Catch::Contains("rank 0 did not answer within 1"));
  CHECK_THAT(rv.error_text(), Catch::Contains("MASTER_ADDR/MASTER_PORT"));
  CHECK(s >= 0.9);
  CHECK(s < 3.0);
}

TEST_CASE("rank 0 names the ranks that never joined after its deadline") {
  auto res = run_job(1, {1}, {42}, 10, false);  // warm-up: world size 1 needs nobody
  CHECK(res[0].ok);
  auto listener = RendezvousListener::open(0);
  REQUIRE(listener.ok());
  RendezvousOptions o;
  o.port = listener.value()->port();
  o.world_size = 3;
  o.timeout_s = 0.5;
  auto rv = Rendezvous::serve(*listener.value(), o, test_blob());
  REQUIRE_FALSE(rv.ok());
  CHECK_THAT(rv.error_text(), Catch::Contains("1 of 3 ranks joined"));
  CHECK_THAT(rv.error_text(), Catch::Contains("missing ranks: 1, 2"));
}

TEST_CASE("a barrier with a rank that never arrives fails within the deadline, naming it") {
  auto listener = RendezvousListener::open(0);
  REQUIRE(listener.ok());
  const int port = listener.value()->port();
  std::string err0;
  std::unique_ptr<Rendezvous> r1;
  std::thread t0([&] {
    RendezvousOptions o;
    o.port = port;
    o.world_size = 2;
    o.timeout_s = 1.0;
    auto rv = Rendezvous::serve(*listener.value(), o, test_blob());
    REQUIRE(rv.ok());
    Status b = rv.value()->barrier();
    err0 = b.ok() ? "" : b.error_text();
  });
  RendezvousOptions o;
  o.port = port;
  o.rank = 1;
  o.world_size = 2;
  o.timeout_s = 5.0;
  std::vector<uint8_t> blob;
  auto rv = Rendezvous::join(o, &blob);
  REQUIRE(rv.ok());
  t0.join();  // rank 1 never enters the barrier
  CHECK_THAT(err0, Catch::Contains("rank 1 did not arrive"));
}
