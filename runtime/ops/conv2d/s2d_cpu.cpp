// Space-to-depth CPU references and the selection rule (see s2d.h).
#include "runtime/ops/conv2d/s2d.h"

#include <algorithm>

namespace trctl {

bool s2d_conv_eligible(const Conv2dGeom& g) {
  return g.stride_h == 2 && g.stride_w == 2 && g.dil_h == 1 && g.dil_w == 1 && g.groups == 1 && g.c >= 1 &&
         4 * g.c <= 16 && g.r >= 2 && g.s >= 2 && g.k % 8 == 0;
}

int64_t s2d_channels(const Conv2dGeom& g) { return (4 * g.c + 7) / 8 * 8; }

Conv2dGeom s2d_conv_geom(const Conv2dGeom& g) {
  Conv2dGeom z;
  z.n = g.n;
  z.h = g.p + (g.r + 1) / 2 - 1;
  z.w = g.q + (g.s + 1) / 2 - 1;
  z.c = s2d_channels(g);
  z.k = g.k;
  z.r = (g.r + 1) / 2;
  z.s = (g.s + 1) / 2;
  conv2d_geom_finish(z, nullptr);  // always valid for a finished g: Hz >= R2, Wz >= S2
  return z;
}

template <class T>
void s2d_input_cpu(const Conv2dGeom& g, const T* x, T* z) {
  const Conv2dGeom zg = s2d_conv_geom(g);
  const int64_t cz = zg.c;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t u = 0; u < zg.h; ++u)
      for (int64_t v = 0; v < zg.w; ++v) {
        T* out = z + ((n * zg.h + u) * zg.w + v) * cz;
        std::fill(out, out + cz, T(0));
        for (int64_t bh = 0; bh < 2; ++bh)
          for (int64_t bw = 0; bw < 2; ++bw) {
            const int64_t ih = 2 * u + bh - g.pad_h, iw = 2 * v + bw - g.pad_w;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
            std::copy_n(x + ((n * g.h + ih) * g.w + iw) * g.c, g.c, out + (2 * bh + bw) * g.c);
          }
      }
}

template <class T>
void s2d_filter_cpu(const Conv2dGeom& g, const T* w, T* w2) {
  const int64_t cz = s2d_channels(g), r2 = (g.r + 1) / 2, s2 = (g.s + 1) / 2;
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t a = 0; a < r2; ++a)
      for (int64_t e = 0; e < s2; ++e) {
        T* out = w2 + ((k * r2 + a) * s2 + e) * cz;
        std::fill(out, out + cz, T(0));
        for (int64_t bh = 0; bh < 2; ++bh)
          for (int64_t bw = 0; bw < 2; ++bw) {
            const int64_t r = 2 * a + bh, s = 2 * e + bw;
            if (r >= g.r || s >= g.s) continue;
            std::copy_n(w + ((k * g.r + r) * g.s + s) * g.c, g.c, out + (2 * bh + bw) * g.c);
          }
      }
}

template <class T>
void s2d_filter_grad_cpu(const Conv2dGeom& g, const T* dw2, T* dw) {
  const int64_t cz = s2d_channels(g), r2 = (g.r + 1) / 2, s2 = (g.s + 1) / 2;
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t r = 0; r < g.r; ++r)
      for (int64_t s = 0; s < g.s; ++s)
        std::copy_n(dw2 + ((k * r2 + r / 2) * s2 + s / 2) * cz + (2 * (r % 2) + s % 2) * g.c, g.c,
                    dw + ((k * g.r + r) * g.s + s) * g.c);
}

template void s2d_input_cpu<float>(const Conv2dGeom&, const float*, float*);
template void s2d_filter_cpu<float>(const Conv2dGeom&, const float*, float*);
template void s2d_filter_grad_cpu<float>(const Conv2dGeom&, const float*, float*);
template void s2d_input_cpu<double>(const Conv2dGeom&, const double*, double*);
template void s2d_filter_cpu<double>(const Conv2dGeom&, const double*, double*);
template void s2d_filter_grad_cpu<double>(const Conv2dGeom&, const double*, double*);
template void s2d_input_cpu<uint16_t>(const Conv2dGeom&, const uint16_t*, uint16_t*);
template void s2d_filter_cpu<uint16_t>(const Conv2dGeom&, const uint16_t*, uint16_t*);
template void s2d_filter_grad_cpu<uint16_t>(const Conv2dGeom&, const uint16_t*, uint16_t*);

}  // namespace trctl
