// Checked CUDA runtime and cuBLASLt calls: a failure becomes a trctl::Error whose `where` is the caller's file:line
// and whose message names the call and the CUDA/cuBLAS status (STYLE.md §6). Kernel launchers return Status.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/util/error.h"

namespace trctl {

Error cuda_error(cudaError_t err, const char* call, const char* file, int line);
Error cublas_error(cublasStatus_t st, const char* call, const char* file, int line);
// An argument error of a launcher (bad size, null pointer, unsupported dtype), with the caller's location.
Error cuda_arg_error(const char* message, const char* file, int line);

// After a <<<...>>> launch: cudaGetLastError() (no synchronization; legal inside stream capture).
Status cuda_launch_status(const char* kernel, const char* file, int line);

// Best-effort cleanup (destructors): report a failure on stderr and continue, since aborting there would hide
// the error that caused the cleanup.
void cuda_warn_if_error(cudaError_t err, const char* call, const char* file, int line);
void cublas_warn_if_error(cublasStatus_t st, const char* call, const char* file, int line);

// Internal invariant broken: print file:line and abort (never for user or data errors).
[[noreturn]] void cuda_fatal(const char* what, const char* file, int line);

}  // namespace trctl

// The macros only capture file:line and return early; the formatting lives in cuda_check.cpp.
#define TRCTL_CUDA_TRY(call)                                                                   \
  do {                                                                                         \
    const cudaError_t trctl_err_ = (call);                                                     \
    if (trctl_err_ != cudaSuccess) return ::trctl::cuda_error(trctl_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define TRCTL_CUBLAS_TRY(call)                                                                 \
  do {                                                                                         \
    const cublasStatus_t trctl_st_ = (call);                                                   \
    if (trctl_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      return ::trctl::cublas_error(trctl_st_, #call, __FILE__, __LINE__);                      \
  } while (0)

#define TRCTL_CUDA_ARG_CHECK(cond, message)                                                    \
  do {                                                                                         \
    if (!(cond)) return ::trctl::cuda_arg_error(message, __FILE__, __LINE__);                 \
  } while (0)

#define TRCTL_CUDA_LAUNCH_STATUS(kernel_name) ::trctl::cuda_launch_status(kernel_name, __FILE__, __LINE__)

#define TRCTL_CUDA_WARN(call) ::trctl::cuda_warn_if_error((call), #call, __FILE__, __LINE__)
#define TRCTL_CUBLAS_WARN(call) ::trctl::cublas_warn_if_error((call), #call, __FILE__, __LINE__)

#define TRCTL_CUDA_ASSERT(cond)                                                                \
  do {                                                                                         \
    if (!(cond)) ::trctl::cuda_fatal("invariant failed: " #cond, __FILE__, __LINE__);          \
  } while (0)
