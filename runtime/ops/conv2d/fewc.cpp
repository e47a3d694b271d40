// fewc_conv_eligible / fewc_conv_tiling: see fewc.h.
#include "runtime/ops/conv2d/fewc.h"

#include <algorithm>

namespace trctl {

FewcTiling fewc_conv_tiling(const Conv2dGeom& g) {
  FewcTiling t;
  const int64_t stride = g.stride_w;
  t.sg = (g.s + 3) / 4;
  t.ksteps = g.r * t.sg;
  t.mt = (g.q + 15) / 16;
  t.tp = std::min<int64_t>(g.q <= 128 ? 2 : 1, std::max<int64_t>(g.p, 1));
  t.tasks = g.n * ((g.p + t.tp - 1) / t.tp);
  t.patch_rows = (t.tp - 1) * g.stride_h + g.r;
  t.patch_cols = (16 * t.mt - 1) * stride + 4 * t.sg;
  t.w_stride = 16 * t.ksteps + 8;
  t.warps = std::min<int64_t>(8, (t.tp * t.mt + 1) / 2);
  const int64_t elem = 2;
  const int64_t patch = (t.patch_rows * t.patch_cols * 4 + 7) / 8 * 8;  // the staging after it 16-byte aligned
  t.smem_bytes = elem * (g.k * t.w_stride + patch + t.warps * 2 * 16 * (g.k + 8));
  const int64_t raw = t.patch_rows * g.w * g.c;  // the pipelined patch when its rows are whole 16-byte pieces
  if ((g.w * g.c) % 8 == 0 && t.smem_bytes + elem * raw <= kFewcMaxSmemBytes) {
    t.raw_elems = raw;
    t.smem_bytes += elem * raw;
  }
  return t;
}

bool fewc_conv_eligible(const Conv2dGeom& g) {
  if (g.p <= 0 || g.q <= 0 || g.n <= 0) return false;  // not finished
  if (g.groups != 1 || g.dil_h != 1 || g.dil_w != 1) return false;
  if (g.c < 1 || g.c > 4) return false;
  if (g.k != 16 && g.k != 32 && g.k != 64) return false;
  if (g.r < 1 || g.r > 8 || g.s < 1 || g.s > 8) return false;
  if (g.stride_h != g.stride_w || (g.stride_h != 1 && g.stride_h != 2)) return false;
  return fewc_conv_tiling(g).smem_bytes <= kFewcMaxSmemBytes;
}

FewcWgradTiling fewc_wgrad_tiling(const Conv2dGeom& g) {
  FewcWgradTiling w;
  w.t = fewc_conv_tiling(g);
  w.kwarps = (w.t.ksteps + 1) / 2;
  w.tgroups = std::max<int64_t>(1, std::min<int64_t>(8 / w.kwarps, w.t.tp * w.t.mt));
  w.warps = w.kwarps * w.tgroups;
  w.dy_stride = g.k + 8;
  w.patches = g.stride_w == 1 ? 2 : 1;
  // An even row pitch: a B row's offset (row * patch_cols + q * stride + s0) * 4 elements is then 16-byte aligned
  // exactly when q * stride is even, whatever the row (stride 2's pitch is even already; stride 1 adds a zero column).
  w.t.patch_cols += w.t.patch_cols & 1;
  const int64_t patch = (w.t.patch_rows * w.t.patch_cols * 4 + 7) / 8 * 8;
  w.t.raw_elems = (g.w * g.c) % 8 == 0 ? w.t.patch_rows * g.w * g.c : 0;  // 16-byte rows: always pipelined
  if (w.patches == 2) w.odd_pad = ((64 - (2 * patch) % 128 + 128) % 128) / 2;  // patch is a multiple of 8 elements
  w.smem_bytes = 2 * (w.patches * patch + w.odd_pad + 2 * w.t.tp * w.t.mt * 16 * w.dy_stride + w.t.raw_elems + 8);
  const int64_t x_bytes = 2 * (w.t.tp * w.t.mt * 16 * g.k);  // x's one staging buffer, rows of K (unpadded)
  const int64_t groups_sums = 4 * (w.tgroups - 1) * g.k * 16 * w.t.ksteps;
  w.bn_smem_bytes = std::max<int64_t>(w.smem_bytes + x_bytes + 5 * g.k * 4, groups_sums);
  w.smem_bytes = std::max<int64_t>(w.smem_bytes, groups_sums);
  return w;
}

bool fewc_wgrad_eligible(const Conv2dGeom& g) {
  return fewc_conv_eligible(g) && g.k == 64 && fewc_wgrad_tiling(g).smem_bytes <= kFewcMaxSmemBytes;
}

}  // namespace trctl
