// NcclComm (CUDA builds): the NCCL communicator of a data-parallel job, created from the TCP rendezvous (rank 0's
// ncclUniqueId), its communication stream, capturable in-place gradient averages, and a watchdog thread that ends
// the process with a clear error when NCCL reports an asynchronous error or no step's collectives finish for
// DistEnv::timeout_s (a peer died or hangs). No NCCL types in this header: a build without NCCL links
// nccl_comm_none.cpp, whose create() says "not supported".
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/util/error.h"
#include "runtime/dist/rendezvous.h"

namespace trctl {

class NcclComm {
 public:
  // Sets NCCL_NVLS_ENABLE=0 (NVLink multicast stays off), runs the rendezvous (job_hash: ranks of another job are
  // refused), initialises the communicator on `device` with a deadline of env.timeout_s.
  static Result<std::unique_ptr<NcclComm>> create(const DistEnv& env, uint64_t job_hash, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int world_size() const;
  cudaStream_t stream() const;  // the communication stream (non-blocking); launches below go here
  // In place: data (count floats) becomes the average over the ranks (ncclAvg: the 1/N scale folded into the
  // reduction; with one rank the data is unchanged). Capturable in a CUDA graph.
  Status all_reduce_avg(float* data, int64_t count);
  // One step's collectives are done (a 1-thread kernel counting on the device; capturable): the watchdog's progress.
  Status tick();
  // The host queued one more tick (after launching a step that holds one).
  void note_enqueued();
  // Polls NCCL's asynchronous error and the tick counter every 0.5 s from a thread; on an error, or ticks queued but
  // none done for timeout_s, prints "error: rank R: ..." to stderr, aborts the communicator and exits the process
  // with status 1 (a stuck CUDA stream cannot be returned from).
  Status start_watchdog();
  // A host barrier over the rendezvous connections.
  Status barrier();
  std::string describe() const;  // "NCCL 2.28.9, rank 0/2, device 0"

  struct Impl;

 private:
  explicit NcclComm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trctl
