// Batch norm kernels (batchnorm_cuda.h) without a fused max pool: the training forward (statistics, finalize,
// apply), the eval forward (apply) and the backward (statistics, finalize, apply over the full-resolution dy). The
// shared geometry, accumulators and the backward's kernels are in batchnorm_kernels.cuh (its comment describes
// the three launches); the fused max pool's kernels in batchnorm_pool.cu.
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_kernels.cuh"

namespace trctl {

namespace {

// Pass 3 forward (train and eval): y = relu?((x - mean) * (gamma * inv) + beta [+ res]), inv = invstd, or
// 1/sqrt(var + eps) when var_not_invstd (eval: running_var). x, y, res (rows,c); y may alias x or res; res nullable.
// mean_shift (c), nullable: subtracted from mean (eval with a folded conv bias: running_mean - b).
// Its elements are independent, so it has its own geometry (any gives the same values): block (tx, ty), tx * ty =
// kApplyThreads, tx * V channels (grid.x blocks across c); the grid sweeps the rows together -- thread (tx, ty) of
// block b takes rows b * ty + ty + k * W, W = gridDim.y * ty -- U rows at a time, the next U loaded before the
// current ones are computed and stored, so that a thread always has loads in flight. The statistics' row-block
// geometry (1,024 separate row ranges, 4 rows loaded, then computed and stored, then the next 4) ran VGG's 224^2
// apply at 75 % of a device copy (RESULTS.md run 62).
constexpr int kApplyThreads = 256;
constexpr int kApplyBlocksPerSm = 3;  // 768 threads per SM, up to 85 registers: two sets of U packs + constants

template <class T, int V, int U, bool kRes>
__global__ void __launch_bounds__(kApplyThreads, kApplyBlocksPerSm)
    bn_fwd_apply_kernel(const T* x, const T* res, T* y, const float* __restrict__ gamma, const float* __restrict__ beta,
                        const float* __restrict__ mean, const float* __restrict__ inv_or_var, bool var_not_invstd,
                        float eps, bool relu, int64_t rows, int64_t c, const float* __restrict__ mean_shift) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  ApplyConsts k[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    k[j] = apply_consts(col + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
  const int64_t w = static_cast<int64_t>(gridDim.y) * blockDim.y;  // rows between a thread's rows
  int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  Pack<T, V> p[U], q[U];
  load_rows(x, r, rows, c, col, p, w);
  if (kRes) load_rows(res, r, rows, c, col, q, w);
  while (r < rows) {
    const int64_t rn = r + U * w;
    Pack<T, V> pn[U], qn[U];
    load_rows(x, rn, rows, c, col, pn, w);  // before the stores below: other rows, so y aliasing x is harmless
    if (kRes) load_rows(res, rn, rows, c, col, qn, w);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * w >= rows) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float v = apply_affine(to_f32(p[u].v[j]), k[j]);
        if (kRes) v += to_f32(q[u].v[j]);
        if (relu) v = apply_relu(v);
        p[u].v[j] = from_f32<T>(v);
      }
      pack_store<V>(y + (r + u * w) * c + col, p[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      p[u] = pn[u];
      if (kRes) q[u] = qn[u];
    }
    r = rn;
  }
}

// Launches the apply over (rows, c): grid.y fills every SM with kApplyBlocksPerSm blocks (fewer for small tensors).
template <class T, int V>
Status bn_fwd_apply_launch(cudaStream_t s, const T* x, const T* res, T* y, const float* gamma, const float* beta,
                           const float* mean, const float* inv_or_var, bool var_not_invstd, float eps, bool relu,
                           int64_t rows, int64_t c, const float* mean_shift) {
  const int64_t packs = (c + V - 1) / V;
  const int tx = channel_threads(packs), ty = kApplyThreads / tx;
  const int64_t fill = int64_t{kGpuSmCount} * kApplyBlocksPerSm;
  const int64_t gx = (packs + tx - 1) / tx;
  const int64_t gy = std::max<int64_t>(1, std::min((rows + ty - 1) / ty, (fill + gx - 1) / gx));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block(tx, ty);
  if (res)
    bn_fwd_apply_kernel<T, V, 2, true><<<grid, block, 0, s>>>(x, res, y, gamma, beta, mean, inv_or_var,
                                                              var_not_invstd, eps, relu, rows, c, mean_shift);
  else
    bn_fwd_apply_kernel<T, V, 4, false><<<grid, block, 0, s>>>(x, nullptr, y, gamma, beta, mean, inv_or_var,
                                                               var_not_invstd, eps, relu, rows, c, mean_shift);
  return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_apply_kernel");
}

// The apply's affine for a consumer that applies it (batchnorm_fwd_train_consts_cuda): scale = gamma * invstd,
// shift = beta - mean * scale, rounded to A, into out (2, c).
template <class A>
__global__ void __launch_bounds__(256)
    bn_affine_consts_kernel(const float* __restrict__ gamma, const float* __restrict__ beta,
                            const float* __restrict__ mean, const float* __restrict__ invstd, int64_t c, A* out) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const float scale = gamma[ch] * invstd[ch];
  out[ch] = from_f32<A>(scale);
  out[c + ch] = from_f32<A>(fmaf(-mean[ch], scale, beta[ch]));
}

}  // namespace

size_t batchnorm_workspace_bytes(int64_t rows, int64_t c) {
  if (rows < 1 || c < 1) return 0;
  const RowSplit rs = row_split(rows, c);
  return 2 * align256(static_cast<size_t>(rs.blocks * c) * sizeof(float));
}

Status batchnorm_fwd_train_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                void* y, float* save_mean, float* save_invstd, float* running_mean,
                                float* running_var, int64_t rows, int64_t c, float eps, float momentum, bool relu,
                                void* workspace, size_t workspace_bytes, const void* residual,
                                const float* prebias, const BnSums& sums) {
  TRCTL_CUDA_ARG_CHECK(rows >= 2,
                       "batchnorm_fwd_train_cuda: rows < 2 (training needs more than one value per channel)");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_fwd_train_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && save_mean && save_invstd,
                       "batchnorm_fwd_train_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_fwd_train_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  TRCTL_CUDA_ARG_CHECK(!sums.sum == !sums.sqsum, "batchnorm_fwd_train_cuda: BnSums with one of sum, sqsum null");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Status st = bn_fwd_train_stats<T>(s, static_cast<const T*>(x), sums, rows, c, workspace, eps, momentum, save_mean,
                                      save_invstd, running_mean, running_var, prebias);
    if (!st) return st;
    return with_vector_width<T>(c, {x, y, residual}, [&](auto vw) {
      return bn_fwd_apply_launch<T, decltype(vw)::value>(s, static_cast<const T*>(x), static_cast<const T*>(residual),
                                                         static_cast<T*>(y), gamma, beta, save_mean, save_invstd,
                                                         false, eps, relu, rows, c, nullptr);
    });
  });
}

Status batchnorm_fwd_train_consts_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma,
                                       const float* beta, float* save_mean, float* save_invstd, float* running_mean,
                                       float* running_var, int64_t rows, int64_t c, float eps, float momentum,
                                       void* workspace, size_t workspace_bytes, const float* prebias,
                                       const BnSums& sums, void* scale_shift, GpuDType affine) {
  TRCTL_CUDA_ARG_CHECK(rows >= 2, "batchnorm_fwd_train_consts_cuda: rows < 2");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_fwd_train_consts_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(x && gamma && beta && save_mean && save_invstd, "batchnorm_fwd_train_consts_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(affine != GpuDType::BF16, "batchnorm_fwd_train_consts_cuda: affine must be F16 or F32");
  TRCTL_CUDA_ARG_CHECK(!sums.sum == !sums.sqsum, "batchnorm_fwd_train_consts_cuda: BnSums with one of sum, sqsum null");
  TRCTL_CUDA_ARG_CHECK(sums.sum || (workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c)),
                       "batchnorm_fwd_train_consts_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  Status st = dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return bn_fwd_train_stats<T>(s, static_cast<const T*>(x), sums, rows, c, workspace, eps, momentum, save_mean,
                                 save_invstd, running_mean, running_var, prebias);
  });
  if (!st || !scale_shift) return st;  // no scale_shift: the statistics alone
  const unsigned grid = static_cast<unsigned>((c + 255) / 256);
  if (affine == GpuDType::F16)
    bn_affine_consts_kernel<__half><<<grid, 256, 0, s>>>(gamma, beta, save_mean, save_invstd, c,
                                                          static_cast<__half*>(scale_shift));
  else
    bn_affine_consts_kernel<float><<<grid, 256, 0, s>>>(gamma, beta, save_mean, save_invstd, c,
                                                         static_cast<float*>(scale_shift));
  return TRCTL_CUDA_LAUNCH_STATUS("bn_affine_consts_kernel");
}

Status batchnorm_fwd_eval_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, void* y, int64_t rows, int64_t c,
                               float eps, bool relu, const void* residual, const float* prebias) {
  TRCTL_CUDA_ARG_CHECK(rows >= 0, "batchnorm_fwd_eval_cuda: rows < 0");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_fwd_eval_cuda: c outside [1, 2^31)");
  if (rows == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && running_mean && running_var,
                       "batchnorm_fwd_eval_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vector_width<T>(c, {x, y, residual}, [&](auto vw) {
      return bn_fwd_apply_launch<T, decltype(vw)::value>(s, static_cast<const T*>(x), static_cast<const T*>(residual),
                                                         static_cast<T*>(y), gamma, beta, running_mean, running_var,
                                                         true, eps, relu, rows, c, prebias);
    });
  });
}

Status batchnorm_bwd_cuda(cudaStream_t s, const void* dy, const void* x, const void* relu_y, GpuDType t,
                          const float* gamma, const float* save_mean, const float* save_invstd, void* dx,
                          float* dgamma, float* dbeta, int64_t rows, int64_t c, void* workspace,
                          size_t workspace_bytes, const float* relu_beta, void* g_out) {
  TRCTL_CUDA_ARG_CHECK(rows >= 1, "batchnorm_bwd_cuda: rows < 1");
  TRCTL_CUDA_ARG_CHECK(!g_out || (relu_y && !relu_beta), "batchnorm_bwd_cuda: g_out needs relu_y and no relu_beta");
  TRCTL_CUDA_ARG_CHECK(!g_out || (g_out != x && g_out != relu_y && g_out != dx && g_out != dy),
                       "batchnorm_bwd_cuda: g_out aliases dy, x, relu_y or dx");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_bwd_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(dy && x && gamma && save_mean && save_invstd && dgamma && dbeta,
                       "batchnorm_bwd_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(dx || !g_out, "batchnorm_bwd_cuda: g_out without dx");
  TRCTL_CUDA_ARG_CHECK(dx != x, "batchnorm_bwd_cuda: dx aliases x");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_bwd_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return bn_bwd_launch<T>(s, DenseGrad<T>{static_cast<const T*>(dy)}, x, relu_y, gamma, save_mean, save_invstd,
                            dx, dgamma, dbeta, rows, c, workspace, relu_beta, g_out);
  });
}

Status batchnorm_bwd_apply_cuda(cudaStream_t s, const void* g, const void* x, GpuDType t, const float* gamma,
                                const float* save_mean, const float* save_invstd, const float* dgamma,
                                const float* dbeta, void* dx, int64_t rows, int64_t c) {
  TRCTL_CUDA_ARG_CHECK(rows >= 1, "batchnorm_bwd_apply_cuda: rows < 1");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_bwd_apply_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(g && x && gamma && save_mean && save_invstd && dgamma && dbeta && dx,
                       "batchnorm_bwd_apply_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(dx != x, "batchnorm_bwd_apply_cuda: dx aliases x");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // No workspace (the statistics passes do not run); dgamma and dbeta are read only.
    return bn_bwd_launch<T>(s, DenseGrad<T>{static_cast<const T*>(g)}, x, nullptr, gamma, save_mean, save_invstd, dx,
                            const_cast<float*>(dgamma), const_cast<float*>(dbeta), rows, c, nullptr, nullptr,
                            nullptr, false);
  });
}

#undef BN_LAUNCHED

}  // namespace trctl
