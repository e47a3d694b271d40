// The watchdog's progress counter: one thread adds 1 after a step's collectives (see nccl_comm.h).
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"

namespace trctl {

namespace {
__global__ void dist_tick_kernel(unsigned long long* counter) { *counter += 1; }
}  // namespace

Status dist_tick_cuda(cudaStream_t s, unsigned long long* counter) {
  dist_tick_kernel<<<1, 1, 0, s>>>(counter);
  return TRCTL_CUDA_LAUNCH_STATUS("dist_tick_kernel");
}

}  // namespace trctl
