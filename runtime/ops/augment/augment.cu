// Gather + augment kernels (see augment_cuda.h): the blocks of a sample (one per slice of its pixels) draw the
// sample's parameters exactly as transforms_draw does and evaluate them per pixel as transforms_apply does; a
// one-thread kernel advances the cursor.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/util/philox.h"
#include "dataio/transforms_map.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/augment/augment_cuda.h"

namespace trctl {
namespace {

struct SampleGeo {
  GeoMap maps[kGpuMaxSteps];
  int32_t nmaps;
  int32_t erase, ey, ex, eh, ew;  // one erase box (the last random_erasing step that fired)
  float erase_value;
};

// Label and geometry of one sample: the CPU's draws (transforms_draw_step, shared host/device code) turned into
// the backward maps transforms_apply builds.
__device__ void draw_sample(const GpuPipeline& p, int32_t idx, uint64_t seed, uint32_t epoch, SampleGeo& g) {
  g.nmaps = 0;
  g.erase = 0;
  PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Transform), epoch, static_cast<uint32_t>(idx));
  int h = p.in_h, w = p.in_w;
  for (int i = 0; i < p.nsteps; ++i) {
    const TransformSpec& s = p.steps[i];
    const int h0 = h, w0 = w;
    const StepParams sp = transforms_draw_step(s, &h, &w, rng);
    switch (s.kind) {
      case TransformKind::Pad: g.maps[g.nmaps++] = geo_shift(h0, w0, -s.padding, -s.padding); break;
      case TransformKind::RandomCrop: g.maps[g.nmaps++] = geo_shift(h0, w0, sp.crop_y, sp.crop_x); break;
      case TransformKind::RandomRotation: g.maps[g.nmaps++] = geo_rotation(h0, w0, sp.angle_deg); break;
      case TransformKind::RandomScale: g.maps[g.nmaps++] = geo_scale(h0, w0, sp.scale); break;
      case TransformKind::RandomHorizontalFlip: g.maps[g.nmaps++] = geo_flip(h0, w0, sp.flip); break;
      case TransformKind::Normalize: break;
      case TransformKind::RandomErasing:
        if (sp.erase) {
          g.erase = 1;
          g.ey = sp.erase_y;
          g.ex = sp.erase_x;
          g.eh = sp.erase_h;
          g.ew = sp.erase_w;
          g.erase_value = static_cast<float>(s.value);
        }
        break;
    }
  }
}

// The per-channel normalisation table both batch kernels read, lut (c, 256) = normalize_u8(v, mean[c], std_dev[c]),
// built by the block's threads (the caller synchronises before reading it).
__device__ __forceinline__ void build_normalize_lut(const GpuPipeline& p, float* lut) {
  for (int i = static_cast<int>(threadIdx.x); i < p.c * 256; i += static_cast<int>(blockDim.x))
    lut[i] = normalize_u8(static_cast<uint8_t>(i & 255), p.mean[i >> 8], p.std_dev[i >> 8]);
}

// The split index of the batch's sample j: the epoch order at the cursor plus j, wrapping.
__device__ __forceinline__ int32_t batch_sample(const ResidentSplit& split, uint32_t cursor, int64_t j) {
  return split.order[(static_cast<int64_t>(cursor) + j) % split.n];
}

// Blocks (sample, slice): thread 0 of each draws the sample's parameters into shared memory (the same draws in
// every slice: a few Philox calls), then every thread computes output pixels (all channels) of the slice's range
// by the backward maps. Slices give a large image more than one block (ResNet's 224² batch of 256 had only 256).
// The normalization of a byte is a table per channel (normalize_u8 of all 256 values, built by the block's threads
// while thread 0 draws): the same float operations, so bitwise the values computed per pixel, without two float
// divisions per pixel and channel.
template <class T>
__global__ void augment_kernel(GpuPipeline p, ResidentSplit split, uint64_t seed, int32_t* y, T* x) {
  __shared__ SampleGeo g;
  __shared__ int32_t idx;
  __shared__ float lut[kGpuMaxChannels * 256];  // (c, 256): normalize_u8(v, mean[c], std_dev[c])
  const int64_t j = blockIdx.x;
  build_normalize_lut(p, lut);
  if (threadIdx.x == 0) {
    idx = batch_sample(split, *split.cursor, j);
    if (blockIdx.y == 0) y[j] = split.labels[idx];
    draw_sample(p, idx, seed, *split.epoch, g);
  }
  __syncthreads();
  const int32_t per = p.out_h * p.out_w;
  const int32_t chunk = (per + static_cast<int32_t>(gridDim.y) - 1) / static_cast<int32_t>(gridDim.y);
  const int32_t t0 = static_cast<int32_t>(blockIdx.y) * chunk, t1 = min(per, t0 + chunk);
  const uint8_t* src = split.pixels + static_cast<int64_t>(idx) * p.in_h * p.in_w * p.c;
  for (int32_t t = t0 + static_cast<int32_t>(threadIdx.x); t < t1; t += blockDim.x) {
    const int32_t yy = t / p.out_w, xx = t % p.out_w;
    int32_t sy = 0, sx = 0;
    const bool inside = geo_source_pixel(g.maps, g.nmaps, yy, xx, &sy, &sx);
    const bool erased = g.erase && yy >= g.ey && yy < g.ey + g.eh && xx >= g.ex && xx < g.ex + g.ew;
    T* out = x + (j * per + t) * p.c;
    for (int ch = 0; ch < p.c; ++ch) {
      const uint8_t v = inside ? src[(static_cast<int64_t>(sy) * p.in_w + sx) * p.c + ch] : uint8_t(0);
      out[ch] = from_f32<T>(erased ? g.erase_value : lut[ch * 256 + v]);
    }
  }
}

// The normalize-only pipeline (no geometry, no erasing: synthetic and pre-cropped data; normalize_only below): a
// batch is its samples' bytes in order, each element one table lookup, so the kernel walks the batch's elements V at
// a time (V bytes loaded, V values stored as one 16-byte vector) instead of pixel by pixel with a block per slice.
// The same table and rounding as augment_kernel with no maps: bitwise its output. per_c = H W C elements a sample,
// a multiple of V; batch * per_c < 2^32; V = 8: 8 bytes in, one 16-byte vector of fp16 / bf16 out (the launcher
// checks the alignments). Labels as augment_kernel's.
template <class T, int V>
__global__ void __launch_bounds__(256)
    normalize_batch_kernel(GpuPipeline p, ResidentSplit split, int32_t* y, T* x, uint32_t batch, uint32_t per_c) {
  __shared__ float lut[kGpuMaxChannels * 256];  // (c, 256): normalize_u8(v, mean[c], std_dev[c])
  build_normalize_lut(p, lut);
  __syncthreads();
  const uint32_t cursor = *split.cursor, c = static_cast<uint32_t>(p.c);
  const uint32_t step = static_cast<uint32_t>(grid_thread_count());
  const uint32_t first = static_cast<uint32_t>(grid_thread_index());
  for (uint32_t j = first; j < batch; j += step)
    y[j] = split.labels[batch_sample(split, cursor, j)];
  const uint32_t packs = batch * (per_c / V);
  for (uint32_t k = first; k < packs; k += step) {
    const uint32_t e0 = k * V, j = e0 / per_c, within = e0 - j * per_c;
    const int32_t idx = batch_sample(split, cursor, j);
    const uint8_t* src = split.pixels + static_cast<int64_t>(idx) * per_c + within;
    uint8_t b[V];
    load_bytes<V>(src, b);
    uint32_t ch = within % c;
    Pack<T, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      out.v[e] = from_f32<T>(lut[ch * 256 + b[e]]);
      ch = ch + 1 == c ? 0 : ch + 1;
    }
    pack_store<V>(x + e0, out);
  }
}

__global__ void cursor_advance_kernel(uint32_t* cursor, uint32_t delta, StepBookkeeping book) {
  if (cursor) *cursor += delta;
  if (book.key) {  // before `step` advances: it may be the same counter as `steps`
    *book.key = *book.steps * book.accumulate + *book.micro + 1;
    *book.micro = book.flush ? 0u : *book.micro + 1;
  }
  if (book.step) *book.step += 1;
  if (book.clear) *book.clear = 0;
}

}  // namespace

Result<GpuPipeline> gpu_pipeline_make(const TransformPipeline& p) {
  if (p.steps.size() > static_cast<size_t>(kGpuMaxSteps) || p.c > kGpuMaxChannels)
    return Error{ErrCode::NotSupported, "cuda augment",
                 "the GPU transform kernel handles at most " + std::to_string(kGpuMaxSteps) + " steps and " +
                     std::to_string(kGpuMaxChannels) + " channels"};
  int erasing = 0;
  for (const auto& s : p.steps) erasing += s.kind == TransformKind::RandomErasing;
  if (erasing > 1)
    return Error{ErrCode::NotSupported, "cuda augment", "more than one random_erasing step in a pipeline"};
  GpuPipeline g;
  g.nsteps = static_cast<int32_t>(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) g.steps[i] = p.steps[i];
  g.in_h = p.in_h;
  g.in_w = p.in_w;
  g.c = p.c;
  g.out_h = p.out_h;
  g.out_w = p.out_w;
  for (int ch = 0; ch < p.c; ++ch) {
    g.mean[ch] = p.mean[p.mean.size() == 1 ? 0 : ch];
    g.std_dev[ch] = p.std[p.std.size() == 1 ? 0 : ch];
  }
  return g;
}

bool normalize_only(const GpuPipeline& p) {
  for (int i = 0; i < p.nsteps; ++i)
    if (p.steps[i].kind != TransformKind::Normalize) return false;
  return p.in_h == p.out_h && p.in_w == p.out_w;
}

Status augment_batch_cuda(cudaStream_t stream, const GpuPipeline& p, const ResidentSplit& split, uint64_t seed,
                          int64_t batch, void* x, GpuDType x_type, int32_t* y, const StepBookkeeping& book) {
  TRCTL_CUDA_ARG_CHECK(batch > 0 && batch < (int64_t{1} << 31) && split.n > 0 && x && y && split.cursor && split.epoch,
                       "augment_batch_cuda: bad arguments");
  TRCTL_CUDA_ARG_CHECK(!book.key || (book.micro && book.steps), "augment_batch_cuda: key without micro or steps");
  const int64_t per = static_cast<int64_t>(p.out_h) * p.out_w;
  if (normalize_only(p) && x_type != GpuDType::F32 && (per * p.c) % 8 == 0 && batch * per * p.c < (int64_t{1} << 32) &&
      gpu_aligned(16, x) && gpu_aligned(8, split.pixels)) {
    const uint32_t per_c = static_cast<uint32_t>(per * p.c), nb = static_cast<uint32_t>(batch);
    const unsigned grid = elementwise_grid(batch * per_c / 8);
    if (x_type == GpuDType::F16)
      normalize_batch_kernel<__half, 8><<<grid, kElementwiseBlock, 0, stream>>>(p, split, y, static_cast<__half*>(x),
                                                                                nb, per_c);
    else
      normalize_batch_kernel<__nv_bfloat16, 8><<<grid, kElementwiseBlock, 0, stream>>>(
          p, split, y, static_cast<__nv_bfloat16*>(x), nb, per_c);
    Status st = TRCTL_CUDA_LAUNCH_STATUS("normalize_batch_kernel");
    if (!st.ok()) return st;
    cursor_advance_kernel<<<1, 1, 0, stream>>>(split.cursor, static_cast<uint32_t>(batch), book);
    return TRCTL_CUDA_LAUNCH_STATUS("cursor_advance_kernel");
  }
  // About 8 pixels per thread and block; at most 64 slices of a sample.
  const unsigned slices = static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, per / (256 * 8))));
  const dim3 grid(static_cast<unsigned>(batch), slices);
  const unsigned block = 256;
  switch (x_type) {
    case GpuDType::F32:
      augment_kernel<float><<<grid, block, 0, stream>>>(p, split, seed, y, static_cast<float*>(x));
      break;
    case GpuDType::F16:
      augment_kernel<__half><<<grid, block, 0, stream>>>(p, split, seed, y, static_cast<__half*>(x));
      break;
    case GpuDType::BF16:
      augment_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p, split, seed, y, static_cast<__nv_bfloat16*>(x));
      break;
  }
  Status st = TRCTL_CUDA_LAUNCH_STATUS("augment_kernel");
  if (!st.ok()) return st;
  cursor_advance_kernel<<<1, 1, 0, stream>>>(split.cursor, static_cast<uint32_t>(batch), book);
  return TRCTL_CUDA_LAUNCH_STATUS("cursor_advance_kernel");
}

Status step_bookkeeping_cuda(cudaStream_t stream, const StepBookkeeping& book) {
  TRCTL_CUDA_ARG_CHECK(!book.key || (book.micro && book.steps), "step_bookkeeping_cuda: key without micro or steps");
  cursor_advance_kernel<<<1, 1, 0, stream>>>(nullptr, 0, book);
  return TRCTL_CUDA_LAUNCH_STATUS("cursor_advance_kernel");
}

}  // namespace trctl
