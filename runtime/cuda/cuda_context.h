// CudaContext: everything a CUDA launch needs (device, streams, cuBLASLt and cuDNN handles, preallocated cuBLASLt
// workspace), created once and passed explicitly (no singletons). Move-only; the destructor releases what it owns.
#pragma once
#include <cublasLt.h>
#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "core/util/error.h"

namespace trctl {

// 32 MiB: what cuBLAS recommends for Hopper so that no heuristic candidate is excluded for lack of workspace.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

struct CudaContext {
  int device = -1;
  cudaStream_t stream = nullptr;       // the step stream: every kernel of a training step is launched (and captured) here
  cudaStream_t side_stream = nullptr;  // for work forked off inside a captured step (events join it back); the
                                       // least stream priority, `stream` the greatest
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t cudnn = nullptr;       // bound to `stream` at creation (cuDNN calls re-bind it to their stream)
  void* workspace = nullptr;           // cuBLASLt workspace for GEMMs on `stream` (one per stream if GEMMs overlap)
  size_t workspace_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::string device_name;

  CudaContext() = default;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;
  CudaContext(CudaContext&& o) noexcept { *this = static_cast<CudaContext&&>(o); }
  CudaContext& operator=(CudaContext&& o) noexcept;
  ~CudaContext();
};

// Selects `device`, creates two non-blocking streams, the cuBLASLt and cuDNN handles and the workspace.
Result<CudaContext> cuda_context_create(int device, size_t workspace_bytes = kLtWorkspaceBytes);

// One line: "NVIDIA H200, sm_90, 132 SMs, device 0, workspace 32 MiB".
std::string cuda_context_describe(const CudaContext& ctx);

}  // namespace trctl
