// Multi-process setup without CUDA: DistEnv (the torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) and a TCP rendezvous in which rank 0 hands an opaque blob (the 128-byte ncclUniqueId) to every other
// rank after a handshake (magic, protocol version, world size, job hash), plus a barrier. Protocol: docs/distributed.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

constexpr double kDistDefaultTimeoutS = 60;

struct DistEnv {
  bool enabled = false;  // false: a plain single-process run (no WORLD_SIZE in the environment)
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;   // 0 only with world size 1 (rank 0 then listens on an ephemeral port)
  double timeout_s = kDistDefaultTimeoutS;  // TRCTL_DIST_TIMEOUT_S: rendezvous deadline and the hang watchdog
  int64_t bucket_bytes = int64_t{25} << 20;  // TRCTL_DIST_BUCKET_MB: gradient bucket size (PyTorch DDP's default)
};

// Looks a variable up (getenv in the binary; a map in tests). nullptr: unset.
using EnvLookup = std::function<const char*(const char*)>;

// Parses RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TRCTL_DIST_TIMEOUT_S and TRCTL_DIST_BUCKET_MB. None of the first five
// set: not distributed. Otherwise WORLD_SIZE and RANK are required, LOCAL_RANK defaults to RANK, MASTER_ADDR to
// 127.0.0.1, MASTER_PORT is required when WORLD_SIZE > 1. Every malformed or inconsistent value is reported, all
// at once (ErrCode::Invalid: trctl exits 2).
Result<DistEnv> dist_env_parse(const EnvLookup& env);
Result<DistEnv> dist_env_from_environ();

// "rank 1/4 (local 1), rendezvous 127.0.0.1:29500"
std::string dist_env_describe(const DistEnv& e);

// FNV-1a 64 of `text`: the job hash of a resolved spec (ranks of different jobs refuse to join each other).
uint64_t dist_job_hash(const std::string& text);

struct RendezvousOptions {
  std::string addr = "127.0.0.1";  // rank 0 listens on all interfaces; the others connect here
  int port = 0;                    // rank 0 may pass 0 (ephemeral; see RendezvousListener::port)
  int rank = 0, world_size = 1;
  uint64_t job_hash = 0;
  double timeout_s = kDistDefaultTimeoutS;  // from the call's start: connect retries, the handshake, each barrier
};

constexpr uint32_t kRendezvousVersion = 1;
constexpr size_t kRendezvousMaxBlob = 4096;

// Rank 0's listening socket, bound before the blob exists so that a test (or a launcher) can learn the port.
class RendezvousListener {
 public:
  ~RendezvousListener();
  int port() const { return port_; }
  int fd() const { return fd_; }
  static Result<std::unique_ptr<RendezvousListener>> open(int port);

 private:
  RendezvousListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_ = -1, port_ = 0;
};

// The connections of a finished rendezvous (rank 0: one per other rank; others: one to rank 0), kept for barrier().
class Rendezvous {
 public:
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  // Returns once every rank has entered it, or an error naming the ranks missing after timeout_s.
  Status barrier();
  int rank() const { return opt_.rank; }
  int world_size() const { return opt_.world_size; }

  // Rank 0: accepts world_size - 1 ranks on `listener`, checks each handshake and sends them `blob`.
  static Result<std::unique_ptr<Rendezvous>> serve(RendezvousListener& listener, const RendezvousOptions& o,
                                                   const std::vector<uint8_t>& blob);
  // Ranks > 0: connects to addr:port (retrying until the deadline), sends the handshake, receives the blob.
  static Result<std::unique_ptr<Rendezvous>> join(const RendezvousOptions& o, std::vector<uint8_t>* blob);

 private:
  explicit Rendezvous(const RendezvousOptions& o) : opt_(o) {}
  RendezvousOptions opt_;
  std::vector<int> fds_;  // rank 0: fds_[r - 1] is rank r's connection; others: fds_[0] is rank 0
  uint32_t barriers_ = 0;
};

// Either side: rank 0 opens a listener on o.port, calls make_blob() and serves it; the others join and receive it.
Result<std::unique_ptr<Rendezvous>> rendezvous_run(const RendezvousOptions& o,
                                                   const std::function<Result<std::vector<uint8_t>>()>& make_blob,
                                                   std::vector<uint8_t>* blob);

}  // namespace trctl
