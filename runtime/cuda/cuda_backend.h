// The CUDA backend: lowers the compiled plan onto one GPU. One device arena holds the plan's regions at their
// offsets; every program (train, train_last, eval, eval_last) is lowered to kernel launches (cuBLASLt GEMMs with
// bias/ReLU epilogues, fused softmax cross-entropy, fused optimizers over whole regions, GPU augmentation of the
// resident dataset), captured once as a CUDA graph and replayed for every batch. Learning rate, step counter,
// loss scale and data cursor live in device memory, so the host never waits inside an epoch.
#pragma once
#include <memory>

#include "runtime/backend.h"
#include "runtime/dist/rendezvous.h"

namespace trctl {

// Number of usable CUDA devices; 0 when there is no device or no driver (never fails).
int cuda_device_count();

// Initialises the CUDA driver and the primary context of device 0 (cheap if already done; errors are left for
// the backend's own initialisation to report).
void cuda_warm_up();

Result<std::unique_ptr<Backend>> make_cuda_backend(const Compiled& c, uint64_t seed);
// One rank of a data-parallel job (dist.enabled; world size 1 included): device LOCAL_RANK, an NCCL communicator
// from the rendezvous, gradients averaged in buckets inside the captured step (docs/distributed.md).
Result<std::unique_ptr<Backend>> make_cuda_backend_dist(const Compiled& c, uint64_t seed, const DistEnv& dist);

}  // namespace trctl
