// The warpgroup tensor-core 3x3 convolution forward on Hopper (wgmma, compiled for sm_90a only: wgconv_sm90a.cu):
// y (N, H, W, K) = conv(x (N, H, W, C), w (K, 3, 3, C)), stride 1, padding 1, no bias, C and K multiples of 64,
// io F16 or BF16, fp32 accumulation and one rounding to io at the end. Deterministic: every output is one thread's
// sum in a fixed order (taps, then 64-channel chunks, then 16-channel steps).
//
// Implicit GEMM: M = N*H*W output pixels by K output channels, reduced over 9 taps x C channels in chunks of 64.
// A CTA (two warpgroups, 256 threads) owns a BM x BN output tile; per chunk it stages BM input pixels' 64 channels
// (one 128-byte row each, zero for a tap outside the image) and BN filters' 64 channels in shared memory with the
// 128-byte swizzle wgmma reads, through cp.async in a circular buffer of stages, and each warpgroup runs m64nBNk16
// wgmma on its BM/2 rows (the ring kernels below stage differently). The layer shapes it exists for: VGG16's 3x3
// layers at 224^2 x 64 and 112^2, where cuDNN's kernels run at 56-80 % of the tensor-core ceiling and the batch-norm
// passes around them could be fused in. `trctl bench kernels`' "wgconv" rows time it against cuDNN: the tiled
// kernel is 1.3-1.8x slower at every VGG layer; the ring px kernel (C == 64) matches cuDNN's forward at VGG's
// conv1_2 and beats its data gradient there (RESULTS.md run 61). The backend routes the data gradients the ring px
// kernel takes to it with train.conv_wgconv: dgrad (conv_route.h); nothing else.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/wgconv_rule.h"  // wgconv_eligible, the ring kernels' shared memory

namespace trctl {

// The kernel and its CTA tile (output pixels x output channels).
// M*N*: the tiled kernel -- each CTA stages its pixels' input once per tap (9 loads of every input row from L2) and
// its filters per chunk; any C % 64 == 0.
// Ring*: the row-ring kernel, C == 64 only -- persistent CTAs, each with its filter slice resident in shared memory,
// walk a contiguous range of the zero-padded input plane ((H + 2) x (W + 2) positions per image) in tiles of 128
// positions; the input rows live in a ring that keeps the 2 (W + 2) + 2 rows of halo shared by consecutive tiles,
// so each input row is loaded from L2 about once, and a tap is a shifted window of the ring (outputs on the
// padding border are computed and dropped: 2/(W+2) of the work per side). The next tile's rows load while a tile's
// wgmma run, and the two warpgroups ping-pong: one stores its outputs while the other's wgmma run.
// RingPx256N64: the ring kernel with the roles swapped -- m64 = the 64 filters, n128 = a warpgroup's 128 positions
// (tiles of 256) -- for less shared-memory operand traffic per tensor-core cycle (wgconv_sm90a.cu).
enum class WgConvTile { M128N64, M256N64, M128N128, M256N128, Ring128N64, Ring128N128, RingPx256N64 };
inline constexpr WgConvTile kWgConvTiles[] = {WgConvTile::M128N64,    WgConvTile::M256N64,
                                              WgConvTile::M128N128,   WgConvTile::M256N128,
                                              WgConvTile::Ring128N64, WgConvTile::Ring128N128,
                                              WgConvTile::RingPx256N64};
const char* wgconv_tile_name(WgConvTile t);  // e.g. "128x64", "ring 128x64", "ring px 256x64"
bool wgconv_tile_is_ring(WgConvTile t);
// Whether the tile's shape takes an eligible geometry: K a multiple of its output-channel width, wgconv_ring_fits
// for a ring tile (the plan may still refuse it for shared memory).
bool wgconv_tile_fits(const Conv2dGeom& g, WgConvTile t);


// The tile a plan takes unless told: K % 128 == 0 -> 128x128, else 128x64.
WgConvTile wgconv_default_tile(const Conv2dGeom& g);

struct WgConvPlan {
  Conv2dGeom g;  // finished, wgconv_eligible
  GpuDType io = GpuDType::F16;
  WgConvTile tile = WgConvTile::M128N64;
  int bm = 128, bn = 64, stages = 4;
  int64_t grid_m = 0, grid_n = 0;  // tiled: pixel tiles x output-channel tiles (a 1-D grid of grid_m * grid_n CTAs);
                                   // ring: CTAs per output-channel tile (each a contiguous run of tiles) x tiles
  int ring_rows = 0;               // ring: rows of the ring (a power of two; a window of mirror rows follow it)
  bool phase_from_start = false;   // ring: the window descriptors' base offset (wgmma_sm90a.cuh, sw128_desc_at;
                                   // false is what the hardware follows, run 60)
  size_t smem_bytes = 0;           // dynamic shared memory of one CTA (with 1 KiB of alignment slack)
};

// The current device's SM count where the sm_90a kernels can run on it; NotSupported naming `what` ("the wgmma
// conv") on a device that is not compute capability 9.0, the CUDA error of the queries otherwise. Both plans' check.
Result<int> wgconv_device_sms(const std::string& what);

// NotSupported for a geometry wgconv_eligible refuses (a ring tile: also C != 64, or a ring and filter slice over
// the shared-memory limit), an io type other than F16/BF16, or a device the sm_90a kernel cannot run on (not
// compute capability 9.0); the CUDA error of the attribute or device queries otherwise. Made outside stream capture
// (it sets the kernel's shared-memory limit). A ring plan's grid_m may be lowered (>= 1) to make each CTA walk
// more tiles; the launch computes the runs from it.
Result<WgConvPlan> wgconv_plan(const Conv2dGeom& g, GpuDType io, WgConvTile tile);

// The batch-norm apply (+ ReLU) of the conv's input, folded into a ring kernel's staging: the conv reads
// relu?((x - mean) * (gamma * invstd) + beta) of each input element as its row lands -- bitwise what the batch
// norm's apply pass would have stored (the same arithmetic: runtime/ops/batchnorm/bn_elem.cuh) -- and zeros for the
// padding, as a conv of the stored output would. All four (C) f32, training constants (save_mean, save_invstd).
struct WgConvPrologue {
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  bool relu = true;
  // When set (N, H, W, C of io, 16-byte aligned, not x): the transformed input is written there too -- bitwise the
  // apply pass's output, so a weight gradient can read it while the apply pass itself is gone. Rows that two CTAs'
  // spans share are written by both, with the same bits.
  void* act_out = nullptr;
};

// y's per-channel batch statistics from the epilogue (RingPx256N64 only): sum[k] and sqsum[k] (f32) over the
// N*H*W outputs of channel k as rounded to io and stored. Each thread adds its own outputs in f32 in its tile
// order, the 4 lanes of a channel row and then the two warpgroups combine in a fixed order into a per-CTA partial
// (grid_m x K x 2 f32 in ws), and a second kernel adds the partials in float64 in run order: deterministic for the
// plan's grid.
struct WgConvStats {
  float* sum = nullptr;    // (K)
  float* sqsum = nullptr;  // (K)
  void* ws = nullptr;      // wgconv_stats_workspace_bytes
  size_t ws_bytes = 0;
};
size_t wgconv_stats_workspace_bytes(const WgConvPlan& plan);

// The backward of a training batch norm + ReLU whose incoming gradient g this conv computes (RingPx256N64 only; a
// data gradient: y is dL/d relu(bn(bx)) of the batch norm's input bx, shape (N, H, W, K)), from the epilogue, as
// cuDNN's graph (d) does for train.conv_bn_backward fused: each output rounded to io, then masked by the ReLU
// recomputed from bx (bn_elem.cuh's relu_kept with the forward's beta: bitwise the batch norm's own mask) and stored
// masked; dbeta[k] = sum of the masked g and dgamma[k] = invstd[k] * sum of g * (bx - mean[k]) over the N*H*W
// outputs (batchnorm_bwd_cuda's first two passes: each thread's own outputs in f32 in its tile order, the 8 lanes
// of a channel pair and the two warpgroups in a fixed order into a per-CTA partial, grid_m x K x 2 f32 in ws, the
// partials added in float64 in run order by a second kernel: deterministic for the plan's grid). The batch norm then
// needs its dx pass alone (batchnorm_bwd_apply_cuda), or nothing where a few-channel weight gradient computes dx.
struct WgConvBnBwd {
  const void* x = nullptr;  // bx (N, H, W, K) of io, 4-byte aligned
  const float* gamma = nullptr;
  const float* beta = nullptr;  // the forward's (the ReLU mask)
  const float* mean = nullptr;  // save_mean
  const float* invstd = nullptr;  // save_invstd
  float* dgamma = nullptr;  // (K) out
  float* dbeta = nullptr;   // (K) out
  void* ws = nullptr;       // wgconv_stats_workspace_bytes
  size_t ws_bytes = 0;
};

// x, w 16-byte aligned, y 4-byte aligned (Internal error otherwise). prologue: nullptr, or (a ring plan only, else
// NotSupported) x's batch norm applied while staging it. stats: nullptr, or (RingPx256N64 only, else NotSupported;
// a short workspace is an Internal error) y's statistics. bn_bwd: nullptr, or (RingPx256N64 only, not with stats
// or a prologue, else NotSupported) the batch-norm backward epilogue. Allocates nothing, does not synchronize:
// capturable.
Status wgconv_fwd_cuda(cudaStream_t stream, const WgConvPlan& plan, const void* x, const void* w, void* y,
                       const WgConvPrologue* prologue = nullptr, const WgConvStats* stats = nullptr,
                       const WgConvBnBwd* bn_bwd = nullptr);

// The data gradient through the same kernels: for a forward geometry g, dx (N, H, W, C) = conv(dy (N, H, W, K), w')
// with w' (C, 3, 3, K), w'[c][r][s][k] = w[k][2 - r][2 - s][c] (the filters flipped and transposed, what
// wgconv_flip_filters_cuda writes into K * 9 * C elements of scratch): plan wgconv_dgrad_geom(g) (wgconv_rule.h)
// and run wgconv_fwd_cuda(plan, dy, w', dx).
// w (K, 3, 3, C) -> w' (C, 3, 3, K) of type io (F16 or BF16, else Internal); capturable.
Status wgconv_flip_filters_cuda(cudaStream_t stream, GpuDType io, const void* w, int64_t k, int64_t c, void* w_flipped);

// ---- The ring weight gradient (wgconv_wgrad_sm90a.cu; wgconv_wgrad_ring_eligible: C, K of 64 or 128) ----
// dw (K, 3, 3, C) f32 = sum over the output pixels of dy (N, H, W, K) x the input x (N, H, W, C) at each tap, both
// io (F16 or BF16). A CTA takes one 64-filter x 64-channel block of dw; per tap a GEMM with its 64 filters as M, its
// 64 channels as N and the positions of the padded plane as the reduction: A = dy^T (a tile's rows loaded into
// registers with ldmatrix.trans, reused by its three taps), B = the tap's shifted window of x's row ring (MN-major: a
// row is a position's 64 channels; merged_taps: the three taps as one N = 192 operand). Persistent CTAs of three
// warpgroups (warpgroup r takes the filter row r's three taps: 3 x 32 f32 accumulators a thread) walk a contiguous
// range of tiles of kWgconvWgradTile positions, software-pipelined three or four tiles deep; each CTA writes its
// (9, K, C) f32 partial to ws and a second kernel adds the partials in CTA order in float64: deterministic for the
// plan's grid. The backend runs it under train.conv_wgconv: wgrad, bwd or all where wgconv_wgrad_route_eligible
// (C = 64; conv_route.h).
struct WgConvWgradPlan {
  Conv2dGeom g;  // finished, wgconv_wgrad_ring_eligible
  GpuDType io = GpuDType::F16;
  int depth = 0;         // tiles in shared memory at once (wgconv_wgrad_depth(g) unless the plan was asked for 3)
  int ring_rows = 0;     // wgconv_wgrad_ring_rows(g, depth)
  int64_t grid = 0;      // CTAs: the (K / 64) x (C / 64) blocks times the position ranges (about one CTA per SM;
                         // may be lowered to another multiple of the blocks, to make each walk more tiles)
  size_t smem_bytes = 0;  // wgconv_wgrad_smem_bytes(g, depth, prologue)
  bool prologue = false;  // x is a batch norm's input: the launch takes its WgConvPrologue (act_out unused) and the
                          // kernel applies it to each x row as it lands -- bitwise the weight gradient of the apply
                          // pass's output, without that output
  bool merged_taps = true;  // a warpgroup's three taps as one m64n192 wgmma per k step (its B: the first tap's
                            // window with 64-channel blocks one ring row apart) instead of three m64n64 (false):
                            // 10-16 % faster at conv1_2 and conv2_2 (run 67, call 7); the test and bench kernels
                            // run both.
                            // The windows' base offset stays 0: run 67 measured that reading right and
                            // (start >> 7) % 8 wrong, as the forward's (run 60)
};
// depth: 0 for the deepest pipeline that fits (wgconv_wgrad_depth), else kWgconvWgradMinDepth ..
// kWgconvWgradMaxDepth (NotSupported where wgconv_wgrad_depth_fits says no).
// NotSupported for a geometry wgconv_wgrad_ring_eligible refuses, an io type other than F16/BF16 or a device that is
// not compute capability 9.0; the CUDA error of the attribute or device queries otherwise. Made outside capture.
// prologue: WgConvWgradPlan::prologue (its constants' shared memory counted in the depth's fit).
Result<WgConvWgradPlan> wgconv_wgrad_plan(const Conv2dGeom& g, GpuDType io, int depth = 0, bool prologue = false);
size_t wgconv_wgrad_workspace_bytes(const WgConvWgradPlan& plan);  // grid x 9 x 64 x 64 f32
// dy, x 16-byte aligned; ws of wgconv_wgrad_workspace_bytes, a grid that is a multiple of the blocks (Internal error
// otherwise); dw (K, 3, 3, C) f32 overwritten. pro: set exactly when plan.prologue (x then the batch norm's input;
// training constants, its ReLU flag; act_out ignored). Allocates nothing, does not synchronize: capturable.
Status wgconv_wgrad_cuda(cudaStream_t stream, const WgConvWgradPlan& plan, const void* dy, const void* x, float* dw,
                         void* ws, size_t ws_bytes, const WgConvPrologue* pro = nullptr);

}  // namespace trctl
