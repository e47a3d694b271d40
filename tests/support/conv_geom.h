// Test helper: a finished Conv2dGeom from its sizes (FAILs the test case when conv2d_geom_finish refuses them),
// shared by the im2col tests on the CPU (runtime/ops/conv2d/im2col_test.cpp) and the GPU
// (tests/gpu/im2col_conv_test.cpp).
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl::testing {

// x (n, h, w, c) -> y (n, p, q, k) with an (r, s) filter, strides (sh, sw), paddings (ph, pw), dilations (dh, dw).
inline Conv2dGeom conv_geom(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s, int64_t sh,
                            int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1) {
  Conv2dGeom g;
  g.n = n, g.h = h, g.w = w, g.c = c, g.k = k, g.r = r, g.s = s;
  g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw, g.dil_h = dh, g.dil_w = dw;
  std::string why;
  if (!conv2d_geom_finish(g, &why)) FAIL(why);
  return g;
}

}  // namespace trctl::testing
