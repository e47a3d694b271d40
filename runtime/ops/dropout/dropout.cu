// Dropout kernels: one thread per group of 4 elements, which is exactly one Philox4x32-10 call (4 words), loaded
// and stored as one vector when aligned.
#include "core/util/philox.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/dropout/dropout_cuda.h"

namespace trctl {

namespace {

// Same kernel for forward and backward: both are "keep ? in * scale : 0" with the same mask.
template <class T, bool kAligned>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, float p, float scale, uint32_t seed_lo,
                               uint32_t seed_hi, uint32_t op_id, const uint32_t* step_ptr) {
  const uint32_t step = *step_ptr;
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = grid_thread_index(); g < groups; g += grid_thread_count()) {
    const Philox4 r = philox4x32(static_cast<uint32_t>(g), step, op_id, static_cast<uint32_t>(RngPurpose::Dropout),
                                 seed_lo, seed_hi);
    const int64_t base = g * 4;
    if (kAligned && base + 4 <= n) {
      Pack<T, 4> v = pack_load<4>(in + base);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v.v[j] = philox_uniform(r.v[j]) >= p ? from_f32<T>(to_f32(v.v[j]) * scale) : from_f32<T>(0.0f);
      }
      pack_store<4>(out + base, v);
    } else {
      for (int j = 0; j < 4 && base + j < n; ++j) {
        const T x = in[base + j];
        out[base + j] = philox_uniform(r.v[j]) >= p ? from_f32<T>(to_f32(x) * scale) : from_f32<T>(0.0f);
      }
    }
  }
}

Status dropout_launch(cudaStream_t stream, const DropoutParams& prm, const void* in, void* out, int64_t n,
                      GpuDType dtype, const char* who) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "dropout: n < 0");
  TRCTL_CUDA_ARG_CHECK(prm.p >= 0.0f && prm.p <= 1.0f, "dropout: p outside [0, 1]");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(in && out && prm.step, "dropout: null pointer (input, output or step counter)");
  const uint32_t lo = static_cast<uint32_t>(prm.seed), hi = static_cast<uint32_t>(prm.seed >> 32);
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const unsigned grid = elementwise_grid((n + 3) / 4);
    if (gpu_aligned(4 * sizeof(T), in, out)) {
      dropout_kernel<T, true><<<grid, kElementwiseBlock, 0, stream>>>(src, dst, n, prm.p, prm.scale, lo, hi,
                                                                       prm.op_id, prm.step);
    } else {
      dropout_kernel<T, false><<<grid, kElementwiseBlock, 0, stream>>>(src, dst, n, prm.p, prm.scale, lo, hi,
                                                                        prm.op_id, prm.step);
    }
    return TRCTL_CUDA_LAUNCH_STATUS(who);
  });
}

}  // namespace

Status dropout_fwd_cuda(cudaStream_t stream, const DropoutParams& prm, const void* x, void* y, int64_t n,
                        GpuDType dtype) {
  return dropout_launch(stream, prm, x, y, n, dtype, "dropout_kernel (forward)");
}

Status dropout_bwd_cuda(cudaStream_t stream, const DropoutParams& prm, const void* dy, void* dx, int64_t n,
                        GpuDType dtype) {
  return dropout_launch(stream, prm, dy, dx, n, dtype, "dropout_kernel (backward)");
}

}  // namespace trctl
