// CudaContext creation and release (see cuda_context.h).
#include "runtime/cuda/cuda_context.h"

#include <cstdio>
#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace trctl {

namespace {

// cuDNN failures while creating the context (the conv wrapper has its own checker in runtime/cuda/cudnn_conv.cpp).
#define TRCTL_CUDNN_CTX_TRY(call)                                                                       \
  do {                                                                                                  \
    const cudnnStatus_t trctl_st_ = (call);                                                             \
    if (trctl_st_ != CUDNN_STATUS_SUCCESS)                                                              \
      return Error{ErrCode::Internal, std::string(__FILE__) + ":" + std::to_string(__LINE__),           \
                   std::string(#call) + ": " + cudnnGetErrorString(trctl_st_)};                         \
  } while (0)

void context_release(CudaContext& c) {
  if (c.device < 0) return;
  TRCTL_CUDA_WARN(cudaSetDevice(c.device));
  if (c.workspace) TRCTL_CUDA_WARN(cudaFree(c.workspace));
  if (c.lt) TRCTL_CUBLAS_WARN(cublasLtDestroy(c.lt));
  if (c.cudnn) {
    const cudnnStatus_t st = cudnnDestroy(c.cudnn);
    if (st != CUDNN_STATUS_SUCCESS)
      std::fprintf(stderr, "%s:%d: cudnnDestroy: %s\n", __FILE__, __LINE__, cudnnGetErrorString(st));
  }
  if (c.side_stream) TRCTL_CUDA_WARN(cudaStreamDestroy(c.side_stream));
  if (c.stream) TRCTL_CUDA_WARN(cudaStreamDestroy(c.stream));
  c.workspace = nullptr;
  c.lt = nullptr;
  c.cudnn = nullptr;
  c.stream = c.side_stream = nullptr;
  c.device = -1;
}

Status context_init(CudaContext& c, int device, size_t workspace_bytes) {
  TRCTL_CUDA_TRY(cudaSetDevice(device));
  c.device = device;
  cudaDeviceProp prop{};
  TRCTL_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  c.sm_count = prop.multiProcessorCount;
  c.cc_major = prop.major;
  c.cc_minor = prop.minor;
  c.device_name = prop.name;
  // The step stream at the greatest priority, the side stream at the least: a captured graph instantiated with
  // per-node priorities schedules the step stream's kernels first where both have work.
  int least = 0, greatest = 0;
  TRCTL_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  TRCTL_CUDA_TRY(cudaStreamCreateWithPriority(&c.stream, cudaStreamNonBlocking, greatest));
  TRCTL_CUDA_TRY(cudaStreamCreateWithPriority(&c.side_stream, cudaStreamNonBlocking, least));
  TRCTL_CUBLAS_TRY(cublasLtCreate(&c.lt));
  TRCTL_CUDNN_CTX_TRY(cudnnCreate(&c.cudnn));
  TRCTL_CUDNN_CTX_TRY(cudnnSetStream(c.cudnn, c.stream));
  if (workspace_bytes > 0) TRCTL_CUDA_TRY(cudaMalloc(&c.workspace, workspace_bytes));
  c.workspace_bytes = workspace_bytes;
  return ok_status();
}

}  // namespace

CudaContext& CudaContext::operator=(CudaContext&& o) noexcept {
  if (this != &o) {
    context_release(*this);
    device = std::exchange(o.device, -1);
    stream = std::exchange(o.stream, nullptr);
    side_stream = std::exchange(o.side_stream, nullptr);
    lt = std::exchange(o.lt, nullptr);
    cudnn = std::exchange(o.cudnn, nullptr);
    workspace = std::exchange(o.workspace, nullptr);
    workspace_bytes = std::exchange(o.workspace_bytes, 0);
    sm_count = o.sm_count;
    cc_major = o.cc_major;
    cc_minor = o.cc_minor;
    device_name = std::move(o.device_name);
  }
  return *this;
}

CudaContext::~CudaContext() { context_release(*this); }

Result<CudaContext> cuda_context_create(int device, size_t workspace_bytes) {
  CudaContext c;
  Status st = context_init(c, device, workspace_bytes);
  if (!st) return st.errors();  // `c` releases whatever was created
  return Result<CudaContext>(std::move(c));
}

std::string cuda_context_describe(const CudaContext& c) {
  return c.device_name + ", sm_" + std::to_string(c.cc_major) + std::to_string(c.cc_minor) + ", " +
         std::to_string(c.sm_count) + " SMs, device " + std::to_string(c.device) + ", cuBLASLt workspace " +
         std::to_string(c.workspace_bytes >> 20) + " MiB, cuBLASLt " + std::to_string(cublasLtGetVersion()) +
         ", cuDNN " + std::to_string(cudnnGetVersion());
}

}  // namespace trctl
