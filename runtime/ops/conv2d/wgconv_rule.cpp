// wgconv_eligible, the ring kernels' shape rule and shared memory, the data-gradient geometry and rule: see
// wgconv_rule.h.
#include "runtime/ops/conv2d/wgconv_rule.h"

namespace trctl {

bool wgconv_eligible(const Conv2dGeom& g, std::string* why) {
  auto no = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (g.r != 3 || g.s != 3 || g.stride_h != 1 || g.stride_w != 1 || g.pad_h != 1 || g.pad_w != 1 || g.dil_h != 1 ||
      g.dil_w != 1)
    return no("not a 3x3 stride-1 padding-1 undilated conv");
  if (g.groups != 1) return no("grouped");
  if (g.c % 64 != 0 || g.k % 64 != 0) return no("C and K must be multiples of 64");
  if (g.p != g.h || g.q != g.w) return no("output size differs from the input's");
  if (g.h >= 32768 || g.w >= 32768) return no("H or W of 32768 or more");
  const int64_t lim = static_cast<int64_t>(1) << 31;
  if (g.n * g.h * g.w * g.c >= lim || g.n * g.h * g.w * g.k >= lim || g.k * 9 * g.c >= lim)
    return no("a tensor of 2^31 elements or more");
  return true;
}

bool wgconv_ring_fits(const Conv2dGeom& g) { return g.c == 64 && g.w >= 6; }

Conv2dGeom wgconv_dgrad_geom(const Conv2dGeom& g) {
  Conv2dGeom d = g;
  d.c = g.k, d.k = g.c;
  return d;
}

namespace {
// The ring rows that hold `tiles` tiles of tile_len positions and both halos (2 (W + 3)): a power of two.
int64_t ring_rows_for(const Conv2dGeom& g, int64_t tiles, int64_t tile_len) {
  const int64_t need = tiles * tile_len + 2 * (g.w + 3);
  int64_t rows = 8;
  while (rows < need) rows *= 2;
  return rows;
}
}  // namespace

int64_t wgconv_ring_rows(const Conv2dGeom& g, int tile_len) { return ring_rows_for(g, 2, tile_len); }

int64_t wgconv_ring_smem_bytes(const Conv2dGeom& g, int bn, int tile_len, int window) {
  return (9 * static_cast<int64_t>(bn) + wgconv_ring_rows(g, tile_len) + window) * 128 + 1024;
}

bool wgconv_dgrad_ring_eligible(const Conv2dGeom& g) {
  const Conv2dGeom d = wgconv_dgrad_geom(g);
  return wgconv_eligible(d, nullptr) && wgconv_ring_fits(d) &&
         wgconv_ring_smem_bytes(d, 64, kWgconvPxTile, kWgconvPxWindow) <= kWgconvMaxSmemBytes;
}

int64_t wgconv_wgrad_ring_rows(const Conv2dGeom& g, int depth) { return ring_rows_for(g, depth, kWgconvWgradTile); }

int64_t wgconv_wgrad_smem_bytes(const Conv2dGeom& g, int depth, bool prologue) {
  const int64_t rows = wgconv_wgrad_ring_rows(g, depth) + kWgconvWgradMirror + depth * int64_t{kWgconvWgradTile};
  return rows * 128 + 1024 + (prologue ? kWgconvWgradPrologueBytes : 0);
}

bool wgconv_wgrad_depth_fits(const Conv2dGeom& g, int depth, bool prologue) {
  return depth >= kWgconvWgradMinDepth && depth <= kWgconvWgradMaxDepth &&
         wgconv_wgrad_smem_bytes(g, depth, prologue) <= kWgconvMaxSmemBytes;
}

int wgconv_wgrad_depth(const Conv2dGeom& g, bool prologue) {
  for (int d = kWgconvWgradMaxDepth; d >= kWgconvWgradMinDepth; --d)
    if (wgconv_wgrad_depth_fits(g, d, prologue)) return d;
  return 0;
}

bool wgconv_wgrad_ring_eligible(const Conv2dGeom& g) {
  return wgconv_eligible(g, nullptr) && g.c <= 128 && g.k <= 128 && wgconv_wgrad_depth(g) > 0;
}

bool wgconv_wgrad_route_eligible(const Conv2dGeom& g) { return wgconv_wgrad_ring_eligible(g) && g.c == 64; }

bool wgconv_fwd_ring_eligible(const Conv2dGeom& g) {
  return wgconv_eligible(g, nullptr) && wgconv_ring_fits(g) && g.k == 64 &&
         wgconv_ring_smem_bytes(g, 64, kWgconvPxTile, kWgconvPxWindow) <= kWgconvMaxSmemBytes;
}

}  // namespace trctl
