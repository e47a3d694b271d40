// im2col for the few-input-channel convolutions (RGB stems) that the CUDA backend runs as im2col + cuBLASLt GEMM
// (runtime/cuda/im2col_conv.h): the rule that selects them, the column count, and the CPU reference of the matrix
// the kernel (im2col_cuda.h) writes.
//
// cols (rows = N*P*Q, Kc): row (n, p, q) holds the input window of output pixel (n, p, q), columns in (r, s, c)
// order (the order of a (K, R, S, C) filter row flattened), zero where the window reads padding, and zero in the
// tail columns [C*R*S, Kc), Kc = round_up(C*R*S, 8) (16-byte rows of f16/bf16 for cuBLASLt). So
//   y (N*P*Q, K) = cols * Wc^T      and      dWc (K, Kc) = dY^T (K, N*P*Q) * cols
// with Wc (K, Kc) the filter padded with zero columns.
#pragma once
#include <cstdint>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// The rule: groups == 1, C < 8 (cuDNN's tensor-core kernels need C % 8 == 0; these are the convs it pads), a
// short filter row C*R*S <= 256 (the GEMM's k: the cols matrix stays a few times the image), and K % 8 == 0
// (16-byte rows of y and dY). Pointwise convs never get here (they are GEMMs without im2col).
constexpr int64_t kIm2colMaxFilterRow = 256;
bool im2col_conv_eligible(const Conv2dGeom& g);

// Kc = round_up(C*R*S, 8): the columns of cols and of the padded filter Wc.
int64_t im2col_cols(const Conv2dGeom& g);

// CPU reference: rows [row0, row0 + rows) of cols for x (N, H, W, C), written to cols (rows, kc), kc >=
// C*R*S (columns past C*R*S are zero). g finished (conv2d_geom_finish), groups == 1. T: float, double, or
// uint16_t (f16/bf16 bits: a pure copy, zero = bits 0).
template <class T>
void im2col_cpu(const Conv2dGeom& g, const T* x, int64_t row0, int64_t rows, int64_t kc, T* cols);

}  // namespace trctl
