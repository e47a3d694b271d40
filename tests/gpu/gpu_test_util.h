// Helpers for the GPU tests: device buffers, poisoning, host<->device copies, independent host conversions to
// f16/bf16, seeded random inputs, and comparisons that report the worst element, its index and how many elements
// were left unwritten (still NaN from the poison).
#pragma once
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/gpu_dtype.h"

// Fails the test case with the error text when a Status/Result is not ok.
#define REQUIRE_OK(expr)                                                   \
  do {                                                                     \
    const auto& trctl_st_ = (expr);                                        \
    if (!trctl_st_.ok()) FAIL(#expr " failed:\n" << trctl_st_.error_text()); \
  } while (0)

// The same for CUDA runtime calls made by the tests themselves.
#define REQUIRE_CUDA(call)                                                                          \
  do {                                                                                              \
    const cudaError_t trctl_e_ = (call);                                                            \
    if (trctl_e_ != cudaSuccess)                                                                    \
      FAIL(#call " failed: " << cudaGetErrorName(trctl_e_) << " (" << cudaGetErrorString(trctl_e_) << ")"); \
  } while (0)

namespace trctl::gputest {

// Owned device allocation.
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept;
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Context on device 0 (REQUIREs success).
CudaContext make_context();

// Sets an environment variable for the scope; the old value (or its absence) comes back after, so later tests in
// this process (e.g. the backend tests, which read TRCTL_AUTOTUNE_CACHE) are unaffected.
struct EnvGuard {
  std::string name, old;
  bool had = false;
  EnvGuard(const char* n, const std::string& value) : name(n) {
    if (const char* v = std::getenv(n)) had = true, old = v;
    ::setenv(n, value.c_str(), 1);
  }
  ~EnvGuard() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
};

// Captures enqueue() (-> Status) on ctx.stream into an executable graph, which the caller destroys. The capture is
// always ended, also when a launch fails, so that a failure cannot leave the stream capturing. The default mode,
// cudaStreamCaptureModeGlobal, also rejects synchronizing calls from other threads.
template <class F>
cudaGraphExec_t capture_graph(const CudaContext& ctx, F&& enqueue,
                              cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  REQUIRE_CUDA(cudaStreamBeginCapture(ctx.stream, mode));
  const auto st = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx.stream, &graph);
  REQUIRE_OK(st);
  REQUIRE_CUDA(end);
  REQUIRE(graph != nullptr);
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  return exec;
}

// Host-side copies and fills, ordered against EVERY stream. The context's streams are cudaStreamNonBlocking, so a
// plain cudaMemcpy / cudaMemset (legacy default stream) is not ordered with the kernels queued on them: it does not
// wait for a kernel still reading or writing the buffer, a pageable host-to-device cudaMemcpy may return before its
// DMA has landed, and device-to-device copies and memsets do not block the host at all. (H200 run 2: the optimizer
// test uploaded step 4's gradient while step 3's kernel was still queued, and step 3 used it.) These helpers wait for
// the whole device before and after the copy; tests use them instead of raw cudaMemcpy / cudaMemset.
void copy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
void memset_sync(void* dst, int value, size_t bytes);

// Every byte 0xFF: NaN for f32, f16 and bf16, -1 for int32. Synchronous (memset_sync).
void poison(const DevBuf& b);
// The `tail` bytes after the first `bytes` of a poisoned buffer still 0xFF: nothing stored past the output's end.
void check_tail_poisoned(const std::string& what, const DevBuf& b, size_t bytes, size_t tail);
// Waits for the stream; fails with the CUDA error (an asynchronous kernel fault shows up here).
void sync_ok(const CudaContext& ctx);

template <class T>
DevBuf to_device(const std::vector<T>& h) {
  DevBuf b(h.size() * sizeof(T) + 16);  // +16: a nonempty allocation also for empty vectors, room for offsets
  if (!h.empty()) copy_sync(b.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return b;
}
template <class T>
void upload(void* dst, const std::vector<T>& h) {
  if (!h.empty()) copy_sync(dst, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
}
template <class T>
std::vector<T> from_device(const void* p, size_t n) {
  std::vector<T> h(n);
  if (n) copy_sync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

// Host reference conversions, written independently of cuda_fp16.h: round to nearest even, NaN stays NaN,
// overflow to inf, subnormals kept.
uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t h);
float round_to(GpuDType t, float f);                        // f rounded to t, back in f32
uint16_t lowp_bits(GpuDType t, float f);                    // f16/bf16 bits of f
float lowp_value(GpuDType t, uint16_t bits);
double unit_roundoff(GpuDType t);                           // 2^-24, 2^-11, 2^-8

// Device array of n elements of type t from float values (rounded to t), and back as floats.
DevBuf to_device_as(GpuDType t, const std::vector<float>& v);
std::vector<float> from_device_as(GpuDType t, const void* p, size_t n);

// Seeded generator: every test draws the same inputs on every run.
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  float normal(float mean, float sd) { return std::normal_distribution<float>(mean, sd)(g); }
  int64_t below(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(g); }
  std::vector<float> uniform_vec(size_t n, float lo, float hi);
  std::vector<float> normal_vec(size_t n, float mean, float sd);
};

// Compares got against ref element-wise with a per-element allowed |got - ref| (bound). NaN in got where ref is not
// NaN counts as "unwritten" (outputs are poisoned with NaN before the launch). cols > 0 prints (row, col) indices.
// Always prints one summary line (so the device log shows how close to tolerance each check is) and returns ok.
struct CompareResult {
  bool ok = true;
  std::string text;
};
CompareResult compare_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                            const std::vector<double>& bound, int64_t cols = 0);
// Bitwise comparison of two equally sized byte ranges (host copies), reporting the first differing element.
CompareResult compare_bitwise(const std::string& what, const void* a, const void* b, size_t bytes,
                              size_t elem_size);

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace trctl::gputest

// CHECK a CompareResult and show its text on failure.
#define CHECK_RESULT(expr)       \
  do {                           \
    const auto trctl_r_ = (expr); \
    INFO(trctl_r_.text);         \
    CHECK(trctl_r_.ok);          \
  } while (0)
