// im2col CPU reference and the selection rule (see im2col.h).
#include "runtime/ops/conv2d/im2col.h"

#include <algorithm>

namespace trctl {

bool im2col_conv_eligible(const Conv2dGeom& g) {
  return g.groups == 1 && g.c < 8 && g.c * g.r * g.s <= kIm2colMaxFilterRow && g.k % 8 == 0;
}

int64_t im2col_cols(const Conv2dGeom& g) { return (g.c * g.r * g.s + 7) / 8 * 8; }

template <class T>
void im2col_cpu(const Conv2dGeom& g, const T* x, int64_t row0, int64_t rows, int64_t kc, T* cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = row0 + i;
    const int64_t oq = row % g.q, op = row / g.q % g.p, n = row / (g.q * g.p);
    T* out = cols + i * kc;
    std::fill(out, out + kc, T(0));
    for (int64_t r = 0; r < g.r; ++r) {
      const int64_t ih = op * g.stride_h - g.pad_h + r * g.dil_h;
      for (int64_t s = 0; s < g.s; ++s) {
        const int64_t iw = oq * g.stride_w - g.pad_w + s * g.dil_w;
        if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
        std::copy_n(x + ((n * g.h + ih) * g.w + iw) * g.c, g.c, out + (r * g.s + s) * g.c);
      }
    }
  }
}

template void im2col_cpu<float>(const Conv2dGeom&, const float*, int64_t, int64_t, int64_t, float*);
template void im2col_cpu<double>(const Conv2dGeom&, const double*, int64_t, int64_t, int64_t, double*);
template void im2col_cpu<uint16_t>(const Conv2dGeom&, const uint16_t*, int64_t, int64_t, int64_t, uint16_t*);

}  // namespace trctl
