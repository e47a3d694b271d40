// GPU-test helper for the few-input-channel convolution paths (tests/gpu/im2col_conv_test.cpp,
// tests/gpu/s2d_conv_test.cpp): the io-type tolerance modes, inputs on the 1/64 grid for low precision, the float64
// direct-conv reference (forward with and without bias, weight gradient, each with the same conv of |inputs| as
// its magnitude), and the per-element plus norm-wise check (|got - ref| <= acc * mag + u * |ref|, relative 2-norm
// error below rel).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/gradcheck.h"

namespace trctl::gputest {

struct StemMode {
  GpuDType io;
  double acc, rel;  // forward tolerances (see the tests' file comments)
};
inline const StemMode kStemModes[] = {{GpuDType::F32, 1e-5, 1e-5},
                                      {GpuDType::F16, 2 * std::ldexp(1.0, -11), 1e-2},
                                      {GpuDType::BF16, 2 * std::ldexp(1.0, -8), 1e-2}};

struct StemInputs {
  std::vector<float> x, w, b, dy;  // x (N,H,W,C), w (K,R,S,C), b (K), dy (N,P,Q,K)
};
inline StemInputs stem_inputs(const Conv2dGeom& g, bool lowp, uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = lowp ? static_cast<float>(rng.below(129) - 64) / 64.0f : rng.uniform(-1.0f, 1.0f);
    return v;
  };
  StemInputs in;
  in.x = draw(g.n * g.h * g.w * g.c);
  in.w = draw(g.k * g.r * g.s * g.c);
  in.b = draw(g.k);
  in.dy = draw(g.n * g.p * g.q * g.k);
  return in;
}

// The training batch norm's apply pass (+ ReLU) of x (rows of c channels) as the io type t stores it, with
// runtime/ops/batchnorm/bn_elem.cuh's float operations: x - mean, one fmaf with gamma * invstd and beta, the ReLU,
// one rounding -- what the wgconv ring kernels' prologues must reproduce bitwise.
inline std::vector<float> bn_apply_stored(GpuDType t, const std::vector<float>& x, const std::vector<float>& gamma,
                                          const std::vector<float>& beta, const std::vector<float>& mean,
                                          const std::vector<float>& invstd, bool relu) {
  const size_t c = gamma.size();
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = i % c;
    float v = std::fmaf(round_to(t, x[i]) - mean[ch], gamma[ch] * invstd[ch], beta[ch]);
    if (relu) v = (v > 0.0f || v != v) ? v : 0.0f;
    out[i] = round_to(t, v);
  }
  return out;
}

struct StemRef {
  std::vector<double> y, y_mag, yb, yb_mag, dw, dw_mag;  // the direct conv without and with bias; its wgrad
};
inline StemRef stem_ref(const Conv2dGeom& g, const StemInputs& in, ThreadPool* pool) {
  auto a = [](const std::vector<float>& v) {
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(static_cast<double>(v[i]));
    return r;
  };
  const std::vector<double> x = to_double(in.x), w = to_double(in.w), b = to_double(in.b), dy = to_double(in.dy);
  const std::vector<double> ax = a(in.x), aw = a(in.w), ab = a(in.b), ady = a(in.dy);
  StemRef r;
  for (auto* v : {&r.y, &r.y_mag, &r.yb, &r.yb_mag}) v->resize(dy.size());
  r.dw.resize(w.size()), r.dw_mag.resize(w.size());
  conv2d_fwd_cpu<double>(g, x.data(), w.data(), nullptr, r.y.data(), pool);
  conv2d_fwd_cpu<double>(g, ax.data(), aw.data(), nullptr, r.y_mag.data(), pool);
  conv2d_fwd_cpu<double>(g, x.data(), w.data(), b.data(), r.yb.data(), pool);
  conv2d_fwd_cpu<double>(g, ax.data(), aw.data(), ab.data(), r.yb_mag.data(), pool);
  conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), r.dw.data(), pool);
  conv2d_grad_weight_cpu<double>(g, ady.data(), ax.data(), r.dw_mag.data(), pool);
  return r;
}

inline void check_stem_close(const std::string& what, double acc, double rel, double u, const std::vector<float>& got,
                 const std::vector<double>& ref, const std::vector<double>& mag, int64_t cols) {
  std::vector<double> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) bound[i] = acc * mag[i] + u * std::fabs(ref[i]);
  CHECK_RESULT(compare_close(what, to_double(got), ref, bound, cols));
  const testing::Diff d = testing::diff(got, ref);
  INFO(what << ": norm-wise " << d.str());
  CHECK(d.rel < rel);
}

}  // namespace trctl::gputest
