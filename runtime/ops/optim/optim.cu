// Optimizer kernels: the per-step scalars come from OptHyper in device memory; each thread updates 4 consecutive
// parameters with 16-byte loads of p, g and the state (scalar fallback for misaligned views and the tail).
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/amp/grad_scaler_device.cuh"
#include "runtime/ops/optim/optim_cuda.h"

namespace trctl {

namespace {

enum class OptKind { AdamW, Adam, Sgd };

struct OptScalars {
  float inv_scale, b1, omb1, b2, omb2, eps, bc2_sqrt, momentum, omd;
  bool use_buf, nesterov, first;
};

// The per-group values of one element's group.
struct GroupScalars {
  float wd, step_size, decay_factor, lr;
};

__device__ __forceinline__ OptScalars opt_scalars(const OptHyper* h) {
  OptScalars s;
  s.inv_scale = h->inv_scale;
  s.b1 = static_cast<float>(h->beta1);
  s.omb1 = static_cast<float>(1.0 - h->beta1);
  s.b2 = static_cast<float>(h->beta2);
  s.omb2 = static_cast<float>(1.0 - h->beta2);
  s.eps = static_cast<float>(h->eps);
  s.bc2_sqrt = h->bc2_sqrt;
  s.momentum = static_cast<float>(h->momentum);
  s.omd = static_cast<float>(1.0 - h->dampening);
  s.use_buf = h->momentum != 0.0;
  s.nesterov = h->nesterov != 0;
  s.first = h->step == 1;
  return s;
}

// The group of element i (groups are few and in layout order: a linear scan).
__device__ __forceinline__ GroupScalars group_scalars(const OptHyper* h, int64_t i) {
  int k = 0;
  while (k + 1 < h->groups && i >= h->group[k].end) ++k;
  const OptGroup& g = h->group[k];
  return GroupScalars{g.wd_f, g.step_size, g.decay_factor, g.lr_f};
}

template <OptKind K>
__device__ __forceinline__ void opt_update(const OptScalars& s, const GroupScalars& gs, bool decay, float& p,
                                           float graw, float& m, float& v) {
  float g = graw * s.inv_scale;
  if constexpr (K == OptKind::Sgd) {
    if (decay) g = g + gs.wd * p;
    if (s.use_buf) {
      m = s.first ? g : s.momentum * m + s.omd * g;
      g = s.nesterov ? g + s.momentum * m : m;
    }
    p = p - gs.lr * g;
  } else {
    if (K == OptKind::Adam && decay) g = g + gs.wd * p;
    if (K == OptKind::AdamW && decay) p = p * gs.decay_factor;
    m = s.b1 * m + s.omb1 * g;
    v = s.b2 * v + s.omb2 * (g * g);
    const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
    p = p - gs.step_size * (m / denom);
  }
}

// s1/s2: Adam m/v; SGD momentum buffer/unused. Elements [0, decay_n) get their group's weight decay, the rest
// none. A 4-element chunk never straddles two groups (group ends are multiples of 4).
// L (half / bfloat16; void: none): lp (n) receives the updated parameters rounded to L, exactly what cast_cuda
// writes from p afterwards (AMP's low-precision weight copy, without re-reading p). A skipped step writes neither.
template <OptKind K, bool kVec, class L = void>
__global__ void opt_step_kernel(const OptHyper* __restrict__ h, float* __restrict__ p, const float* __restrict__ g,
                                float* __restrict__ s1, float* __restrict__ s2, int64_t n, int64_t decay_n,
                                void* __restrict__ lp = nullptr) {
  constexpr bool kLowp = !std::is_void_v<L>;
  if (h->skip) return;
  const OptScalars s = opt_scalars(h);
  const bool has1 = K != OptKind::Sgd || s.use_buf;
  const bool has2 = K != OptKind::Sgd;
  if (has1 && s1 == nullptr) __trap();  // SGD with momentum but no buffer: the plan is broken
  const int64_t chunks = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * 4;
    const GroupScalars gs = group_scalars(h, base);
    if (kVec && base + 4 <= n) {
      Pack<float, 4> pp = pack_load<4>(p + base);
      const Pack<float, 4> gg = pack_load<4>(g + base);
      Pack<float, 4> a{}, b{};
      if (has1) a = pack_load<4>(s1 + base);
      if (has2) b = pack_load<4>(s2 + base);
#pragma unroll
      for (int j = 0; j < 4; ++j) opt_update<K>(s, gs, base + j < decay_n, pp.v[j], gg.v[j], a.v[j], b.v[j]);
      pack_store<4>(p + base, pp);
      if (has1) pack_store<4>(s1 + base, a);
      if (has2) pack_store<4>(s2 + base, b);
      if constexpr (kLowp) {
        Pack<L, 4> lo;
#pragma unroll
        for (int j = 0; j < 4; ++j) lo.v[j] = from_f32<L>(pp.v[j]);
        pack_store<4>(static_cast<L*>(lp) + base, lo);  // lp 8-byte aligned (opt_launch's vector condition)
      }
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) {
        float a = has1 ? s1[i] : 0.0f, b = has2 ? s2[i] : 0.0f;
        opt_update<K>(s, gs, i < decay_n, p[i], g[i], a, b);
        if (has1) s1[i] = a;
        if (has2) s2[i] = b;
        if constexpr (kLowp) static_cast<L*>(lp)[i] = from_f32<L>(p[i]);
      }
    }
  }
}

__device__ __forceinline__ void opt_hyper_advance_device(OptHyper* h, const int32_t* found_inf, const float* loss_scale,
                                                         const double* lr_table, int64_t lr_table_len) {
  const uint32_t iter = h->iter + 1;
  h->iter = iter;
  const bool from_table = lr_table && lr_table_len > 0;
  const double table_lr =
      from_table ? lr_table[static_cast<int64_t>(iter) < lr_table_len ? static_cast<int64_t>(iter) - 1 : lr_table_len - 1]
                 : 0.0;
  const int32_t skip = (found_inf && *found_inf != 0) ? 1 : 0;
  h->skip = skip;
  h->inv_scale = loss_scale ? static_cast<float>(1.0 / static_cast<double>(*loss_scale)) : 1.0f;
  if (!skip) h->step += 1;
  h->skipped += skip;
  const int32_t t = h->step;
  const double bc1 = 1.0 - pow(h->beta1, static_cast<double>(t));
  const double bc2 = 1.0 - pow(h->beta2, static_cast<double>(t));
  h->bias_correction1 = static_cast<float>(bc1);
  h->bias_correction2 = static_cast<float>(bc2);
  h->bc2_sqrt = t > 0 ? static_cast<float>(sqrt(bc2)) : 1.0f;
  for (int k = 0; k < h->groups && k < kMaxOptGroups; ++k) {
    OptGroup& g = h->group[k];
    if (from_table) g.lr = table_lr;
    const double lr = g.lr;
    g.step_size = t > 0 ? static_cast<float>(lr / bc1) : 0.0f;
    g.lr_f = static_cast<float>(lr);
    g.decay_factor = static_cast<float>(1.0 - lr * g.weight_decay);
    g.wd_f = static_cast<float>(g.weight_decay);
  }
}

__global__ void opt_hyper_advance_kernel(OptHyper* h, const int32_t* found_inf, const float* loss_scale,
                                         const double* lr_table, int64_t lr_table_len) {
  opt_hyper_advance_device(h, found_inf, loss_scale, lr_table, lr_table_len);
}

// Advance with this step's loss scale (inv_scale for the updates), then the loss-scale update for the next step:
// the update kernels read only h->inv_scale and h->skip, so the scale may change before they run.
__global__ void opt_hyper_advance_scaled_kernel(OptHyper* h, GradScalerState* scaler) {
  opt_hyper_advance_device(h, &scaler->found_inf, &scaler->scale, nullptr, 0);
  grad_scaler_update_device(scaler);
}

template <OptKind K>
Status opt_launch(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* s1, float* s2, int64_t n,
                  int64_t decay_n, const char* who, const LowpCopy& lowp = {}) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "optimizer step: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(h && p && g, "optimizer step: null hyper, param or grad pointer");
  TRCTL_CUDA_ARG_CHECK(K == OptKind::Sgd || (s1 && s2), "optimizer step: null Adam state pointer");
  TRCTL_CUDA_ARG_CHECK(!lowp.dst || lowp.type == GpuDType::F16 || lowp.type == GpuDType::BF16,
                       "optimizer step: the low-precision weight copy must be f16 or bf16");
  const unsigned grid = elementwise_grid((n + 3) / 4);
  const bool vec = gpu_aligned(16, p, g, s1, s2) && gpu_aligned(8, lowp.dst);
  auto launch = [&](auto tag) {
    using L = typename decltype(tag)::type;
    if (vec) {
      opt_step_kernel<K, true, L><<<grid, kElementwiseBlock, 0, stream>>>(h, p, g, s1, s2, n, decay_n, lowp.dst);
    } else {
      opt_step_kernel<K, false, L><<<grid, kElementwiseBlock, 0, stream>>>(h, p, g, s1, s2, n, decay_n, lowp.dst);
    }
    return TRCTL_CUDA_LAUNCH_STATUS(who);
  };
  if (!lowp.dst) return launch(type_tag<void>{});
  if (lowp.type == GpuDType::BF16) return launch(type_tag<__nv_bfloat16>{});
  return launch(type_tag<__half>{});
}

}  // namespace

OptHyper opt_hyper_adam(double lr, double beta1, double beta2, double eps, double weight_decay) {
  OptHyper h;
  h.group[0].lr = lr;
  h.group[0].weight_decay = weight_decay;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  return h;
}

OptHyper opt_hyper_sgd(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  OptHyper h;
  h.group[0].lr = lr;
  h.group[0].weight_decay = weight_decay;
  h.momentum = momentum;
  h.dampening = dampening;
  h.nesterov = nesterov ? 1 : 0;
  return h;
}

Status opt_hyper_advance_cuda(cudaStream_t stream, OptHyper* h, const int32_t* found_inf, const float* loss_scale,
                              const double* lr_table, int64_t lr_table_len) {
  TRCTL_CUDA_ARG_CHECK(h != nullptr, "opt_hyper_advance_cuda: null hyper");
  TRCTL_CUDA_ARG_CHECK(lr_table == nullptr || lr_table_len > 0, "opt_hyper_advance_cuda: empty lr table");
  opt_hyper_advance_kernel<<<1, 1, 0, stream>>>(h, found_inf, loss_scale, lr_table, lr_table_len);
  return TRCTL_CUDA_LAUNCH_STATUS("opt_hyper_advance_kernel");
}

Status adamw_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* m, float* v,
                       int64_t n, bool decay) {
  return opt_launch<OptKind::AdamW>(stream, h, p, g, m, v, n, decay ? n : 0, "opt_step_kernel<AdamW>");
}

Status adam_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* m, float* v,
                      int64_t n, bool decay) {
  return opt_launch<OptKind::Adam>(stream, h, p, g, m, v, n, decay ? n : 0, "opt_step_kernel<Adam>");
}

Status sgd_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* momentum_buf,
                     int64_t n, bool decay) {
  return opt_launch<OptKind::Sgd>(stream, h, p, g, momentum_buf, nullptr, n, decay ? n : 0, "opt_step_kernel<Sgd>");
}

Status optimizer_step_cuda(cudaStream_t stream, CudaOptimizer kind, const OptHyper* h, float* p, const float* g,
                           float* s1, float* s2, int64_t n, int64_t decay_n, const LowpCopy& lowp) {
  TRCTL_CUDA_ARG_CHECK(decay_n >= 0 && decay_n <= n, "optimizer_step_cuda: decay_n outside [0, n]");
  switch (kind) {
    case CudaOptimizer::AdamW:
      return opt_launch<OptKind::AdamW>(stream, h, p, g, s1, s2, n, decay_n, "opt_step_kernel<AdamW>", lowp);
    case CudaOptimizer::Adam:
      return opt_launch<OptKind::Adam>(stream, h, p, g, s1, s2, n, decay_n, "opt_step_kernel<Adam>", lowp);
    case CudaOptimizer::Sgd:
      return opt_launch<OptKind::Sgd>(stream, h, p, g, s1, nullptr, n, decay_n, "opt_step_kernel<Sgd>", lowp);
  }
  return ok_status();
}

Status opt_hyper_advance_scaled_cuda(cudaStream_t stream, OptHyper* h, GradScalerState* scaler) {
  TRCTL_CUDA_ARG_CHECK(h != nullptr && scaler != nullptr, "opt_hyper_advance_scaled_cuda: null pointer");
  opt_hyper_advance_scaled_kernel<<<1, 1, 0, stream>>>(h, scaler);
  return TRCTL_CUDA_LAUNCH_STATUS("opt_hyper_advance_scaled_kernel");
}

}  // namespace trctl
