// Formatting of CUDA / cuBLASLt failures into trctl::Error values (see cuda_check.h).
#include "runtime/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace trctl {

namespace {

std::string where_of(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

ErrCode code_of(cublasStatus_t st) {
  return (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH) ? ErrCode::NotSupported
                                                                                    : ErrCode::Internal;
}

}  // namespace

Error cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  const ErrCode code = (err == cudaErrorInvalidValue || err == cudaErrorInvalidConfiguration) ? ErrCode::Invalid
                                                                                              : ErrCode::Internal;
  return Error{code, where_of(file, line),
               std::string(call) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")"};
}

Error cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  return Error{code_of(st), where_of(file, line),
               std::string(call) + ": " + cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")"};
}

Error cuda_arg_error(const char* message, const char* file, int line) {
  return Error{ErrCode::Invalid, where_of(file, line), message};
}

Status cuda_launch_status(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error(err, (std::string("launch of ") + kernel).c_str(), file, line);
  return ok_status();
}

void cuda_warn_if_error(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) std::fprintf(stderr, "%s\n", cuda_error(err, call, file, line).str().c_str());
}

void cublas_warn_if_error(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS) std::fprintf(stderr, "%s\n", cublas_error(st, call, file, line).str().c_str());
}

void cuda_fatal(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace trctl
