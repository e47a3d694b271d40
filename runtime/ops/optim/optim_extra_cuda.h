// Optimizer extras on the GPU: gradient clipping by the global 2-norm (torch.nn.utils.clip_grad_norm_), the
// weights' exponential moving average (train.ema_decay) and LARS (timm's Lars, trust ratio per tensor). CPU
// references: grad_global_norm_cpu / grad_clip_factor, ema_update_cpu, lars_step_cpu (runtime/ops/optim/optim.h).
// Everything is capturable in a CUDA graph: no host synchronisation and no allocation while a step runs (workspaces
// and tables are allocated once, at lowering), every per-step value read from device memory (OptHyper: skip,
// inv_scale, step, lr), and every reduction in a fixed order (no float atomics: bitwise reproducible).
//
// Step program order (all on the step stream; the first two are the existing ones of optim_cuda.h / amp_cuda.h):
//   grad_check_nonfinite_cuda(g, trainable)     -> found_inf
//   opt_hyper_advance[_scaled]_cuda(h, ...)     -> skip, inv_scale (1 / loss scale), step, lr_f
//   grad_global_norm_cuda(h, g, trainable, max_norm, ws, clip)    [optimizer.clip_grad_norm > 0]
//   grad_clip_fold_cuda(h, clip)                -> h->inv_scale *= clip->factor             [clip_grad_norm > 0]
//   optimizer_step_cuda(h, ...)  or  lars_step_cuda(h, tables, ...)
//   ema_update_cuda(h, w, ema, total, decay)                                                [train.ema_decay > 0]
//   (grad_scaler_update, the lowp weight cast: as before)
// A skipped step (h->skip, non-finite gradients) leaves the clip state, inv_scale, gradients, weights, momentum
// buffers and the EMA untouched.
//
// Why folding the factor into inv_scale is exact: the CPU multiplies the gradients in place (g = fl(g * f)) and its
// update then reads fl(g * 1). The update kernels of optim.cu and lars_step_cuda form fl(g_raw * inv_scale) once,
// rounded on its own, before anything else touches it, so with inv_scale' = fl(inv_scale * f) they see
// fl(g_raw * f) when inv_scale == 1 (fp32), and with a power-of-two inv_scale 2^-k (AMP; barring underflow to
// subnormals) fl(g_raw * 2^-k * f) = fl(fl(g_raw * 2^-k) * f), PyTorch's unscale_ then clip_grad_norm_. The GPU
// test "folding the clip factor into inv_scale equals scaling the gradients in place" checks this bitwise against
// the optim.cu it is built with (PTX of optim.cu as of this writing: mul.f32 of g_raw and inv_scale, its result only
// then an FMA's addend; a kernel that fused g_raw * inv_scale into an FMA would break it: then use
// grad_clip_scale_cuda, the in-place alternative, and leave inv_scale alone). The rest of optim.cu's update is not
// bitwise the CPU's (its FMAs, Adam's b1*m + (1-b1)*g): a clipped step agrees with the CPU's within 1e-6 relative
// (GPU test "a clipped optimizer step on the GPU matches the CPU's clip then update within 1e-6 relative").
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/util/error.h"
#include "runtime/ops/optim/optim_cuda.h"

namespace trctl {

// ---------------------------------------------------------------------------------------------------------------
// Gradient clipping by the global norm.

// Written by grad_global_norm_cuda on every non-skipped step (device memory, 16 bytes).
struct GradClipState {
  double norm = 0.0;    // |g * inv_scale|_2 over the range (summed in double)
  float factor = 1.0f;  // min(max_norm / (float(norm) + 1e-6), 1), in float as grad_clip_factor
  int32_t unused = 0;
};

// Bytes of the workspace grad_global_norm_cuda needs for n gradients (per-block double partials).
size_t grad_global_norm_workspace_bytes(int64_t n);

// g (n) f32, the gradients as the backward pass left them (scaled by the loss scale with AMP; unscaled by
// h->inv_scale here). Two launches: per-block partial sums of (double)fl(g*inv_scale)^2 in a fixed order, then one
// block adds the partials in a fixed order and writes clip->norm and clip->factor. No-op when h->skip.
// workspace: grad_global_norm_workspace_bytes(n) bytes of device memory, 8-byte aligned.
Status grad_global_norm_cuda(cudaStream_t stream, const OptHyper* h, const float* g, int64_t n, double max_norm,
                             void* workspace, GradClipState* clip);

// One thread: h->inv_scale = fl(h->inv_scale * clip->factor) unless h->skip. Run after the advance kernel (which
// rewrites inv_scale every step) and before the update kernels.
Status grad_clip_fold_cuda(cudaStream_t stream, OptHyper* h, const GradClipState* clip);

// The in-place alternative to the fold: g[i] = fl(g[i] * clip->factor) over g (n), unless h->skip (the CPU
// backend's own order). Costs a read and a write of the gradients; not needed while the fold is exact (above).
Status grad_clip_scale_cuda(cudaStream_t stream, const OptHyper* h, const GradClipState* clip, float* g, int64_t n);

// ---------------------------------------------------------------------------------------------------------------
// Exponential moving average of the weights (torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn).

// w, ema (n) f32. After the update kernels: when h->step == 1 (the first applied update) ema = w, else
// ema = fl(ema + fl(fl(1 - decay) * fl(w - ema))), the CPU's float expression (no FMA contraction, bitwise equal
// to ema_update_cpu). No-op when h->skip.
Status ema_update_cuda(cudaStream_t stream, const OptHyper* h, const float* w, float* ema, int64_t n, double decay);

// Exchanges a and b (n) f32 each (swap_ema: validation with the averaged weights, then back). Not step-dependent.
Status swap_cuda(cudaStream_t stream, float* a, float* b, int64_t n);

// ---------------------------------------------------------------------------------------------------------------
// LARS, tensor by tensor over the weight layout.

// One parameter tensor (host and device layout; offsets in elements of the weight layout, shared by p, g and buf).
struct LarsTensor {
  int64_t offset = 0;
  int64_t n = 0;
  int32_t adapt = 0;        // 1: trust ratio when the tensor's group has weight decay; 0: always plain SGD
  int32_t first_chunk = 0;  // filled by lars_tables: the tensor's chunks are [first_chunk, first_chunk + chunks)
  int32_t chunks = 0;
  int32_t unused = 0;
};

// A slice of one tensor: the unit of work of one thread block. [begin, end) in layout elements.
struct LarsChunk {
  int64_t begin = 0, end = 0;
  int32_t tensor = 0;
  int32_t unused = 0;
};

// Elements per chunk: 32768 keeps ResNet-50's 25.6 M parameters at ~900 blocks (a few waves on 132 SMs) while a
// 64-element bias is still one block.
constexpr int64_t kLarsChunkElems = 32768;

// Host tables, built once at lowering from the plan's trainable parameters (frozen ones left out). adapt: as the
// CPU backend passes it to lars_step_cpu (there adapt = group weight decay != 0, so adapt = 1 for every tensor
// gives the same steps: a group without decay has weight_decay 0 on the device too).
struct LarsTables {
  std::vector<LarsTensor> tensors;  // first_chunk / chunks filled in
  std::vector<LarsChunk> chunks;    // tensor by tensor, in order
};
// Empty tensors get no chunk. Errors: negative offset or size, more than 2^31 - 1 chunks.
Result<LarsTables> lars_tables(std::vector<LarsTensor> tensors, int64_t chunk_elems = kLarsChunkElems);

// Device copies of the tables plus the workspace (chunk_count * 2 doubles: sum p^2, sum g'^2 per chunk), all
// allocated and uploaded once before capture.
struct LarsDevice {
  const LarsTensor* tensors = nullptr;
  const LarsChunk* chunks = nullptr;
  int32_t chunk_count = 0;
  double* norms = nullptr;  // (chunk_count, 2) workspace
};
size_t lars_workspace_bytes(int32_t chunk_count);

// The run constants of LARS that OptHyper does not carry (optimizer.trust_coefficient, optimizer.trust_clip).
// Read from h on the device: momentum, dampening, nesterov, eps (set h.eps = optimizer.eps on the opt_hyper_sgd
// block), step, skip, inv_scale, and per tensor its parameter group's lr_f and weight_decay (the group whose
// layout range holds the tensor's offset, as optimizer_step_cuda picks groups by element).
struct LarsConsts {
  double trust_coefficient = 0.001;
  bool trust_clip = false;
};

// p, g, buf: the weight, gradient and momentum-buffer layouts (buf nullptr without momentum, as lars_step_cpu).
// Two launches of chunk_count blocks: (1) per-chunk double sums of p^2 and g'^2 (g' = fl(g * inv_scale)) for the
// adapted tensors; (2) every block adds its tensor's chunk sums in a fixed order (so all blocks of a tensor get the
// same norms), forms the trust ratio exactly as lars_step_cpu in float, and updates its chunk:
//   d = g'; adapted: d = fl(fl(d + fl(wd * p)) * ratio);
//   buf: b = step == 1 ? d : fl(fl(b * momentum) + fl((1 - dampening) * d)); d = nesterov ? fl(d + fl(momentum * b)) : b
//   p = fl(p - fl(lr * d))
// No FMA contraction: given the same norms the result is bitwise lars_step_cpu's; the norms differ from the CPU's
// only in the order of the double sums. No-op when h->skip.
Status lars_step_cuda(cudaStream_t stream, const OptHyper* h, const LarsDevice& tables, const LarsConsts& consts,
                      float* p, const float* g, float* buf);

}  // namespace trctl
