// dgrad_fwd_eligible, dgrad_fwd_geom and the CPU filter transform: see dgrad_fwd.h.
#include "runtime/ops/conv2d/dgrad_fwd.h"

namespace trctl {

bool dgrad_fwd_eligible(const Conv2dGeom& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.groups == 1 && g.pad_h <= g.dil_h * (g.r - 1) &&
         g.pad_w <= g.dil_w * (g.s - 1);
}

Conv2dGeom dgrad_fwd_geom(const Conv2dGeom& g) {
  Conv2dGeom f;
  f.n = g.n, f.h = g.p, f.w = g.q, f.c = g.k;
  f.k = g.c, f.r = g.r, f.s = g.s;
  f.dil_h = g.dil_h, f.dil_w = g.dil_w;
  f.pad_h = g.dil_h * (g.r - 1) - g.pad_h, f.pad_w = g.dil_w * (g.s - 1) - g.pad_w;
  conv2d_geom_finish(f, nullptr);  // valid for a finished, eligible g: pad' >= 0, and its output is H x W
  return f;
}

template <class T>
void dgrad_fwd_filter_cpu(const Conv2dGeom& g, const T* w, T* wf) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t r = 0; r < g.r; ++r)
      for (int64_t s = 0; s < g.s; ++s)
        for (int64_t k = 0; k < g.k; ++k)
          wf[((c * g.r + r) * g.s + s) * g.k + k] = w[((k * g.r + (g.r - 1 - r)) * g.s + (g.s - 1 - s)) * g.c + c];
}

template void dgrad_fwd_filter_cpu<float>(const Conv2dGeom&, const float*, float*);
template void dgrad_fwd_filter_cpu<double>(const Conv2dGeom&, const double*, double*);
template void dgrad_fwd_filter_cpu<uint16_t>(const Conv2dGeom&, const uint16_t*, uint16_t*);

}  // namespace trctl
