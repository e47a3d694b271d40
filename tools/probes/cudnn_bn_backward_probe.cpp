// Device probe (not part of trctl; RESULTS.md records what it prints): which cuDNN engines serve the batch-norm
// BACKWARD fusions issue 4 asks for, on the GPU it runs on, and whether their numbers are right. Pure cuDNN
// backend C API, one graph per case, every engine global index tried (up to 4 that run), each run twice
// (bitwise-equal = deterministic), timed over 20 runs, and checked against a CPU reference:
//   d: DgradDreluBNBwdWeight — conv dgrad -> recomputed BN output ((x - mean) * invstd * gamma + beta; the mean
//      subtracted as ADD with alpha2 = -1, or SUB) -> RELU_BWD writing g -> BN_BWD_WEIGHTS (dgamma, dbeta and the
//      dx-apply coefficients A, B, C); 3x3/1x1, stride 1/2, C = 24/64/256; and the generic alternative with one
//      REDUCTION (sum of g) as the exit node.
//   w: scale + bias + ReLU prologue -> conv wgrad (f16 / f32 intermediates and scale/bias; stride 1/2), and a plain
//      wgrad.
//   a: dBNApply dx = A * g + B * x + C (the full tensor or the per-channel one as the first operand).
// Design notes and sources: docs/cnn.md ("Backward fusions through the cuDNN graph API"). Built by CMake with
// TRCTL_CUDA (target cudnn_bn_backward_probe); tools/device_pack.sh carries it; device_run.sh stage `probe`.
// Written for one-off measurement: compact, and its CK() macro only adds the line number to cuDNN errors.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>
typedef cudnnBackendDescriptor_t D;
typedef std::vector<float> V;
static void ck(cudnnStatus_t s, int l) {
  if (s) {
    char b[600] = {0};
    cudnnGetLastErrorString(b, sizeof b);
    throw std::runtime_error(std::string(cudnnGetErrorString(s)) + " @" + std::to_string(l) + " " + b);
  }
}
#define CK(x) ck((x), __LINE__)
#define BD CUDNN_TYPE_BACKEND_DESCRIPTOR
static D mk(cudnnBackendDescriptorType_t t) {
  D d;
  CK(cudnnBackendCreateDescriptor(t, &d));
  return d;
}
static void sa(D d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  CK(cudnnBackendSetAttribute(d, a, t, n, v));
}
static void fin(D d) {
  CK(cudnnBackendFinalize(d));
}
static const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_HALF;
static D T(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w, bool v = false) {
  D d = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, st[4] = {c * h * w, 1, w * c, c}, al = 16;
  bool vv = v;
  sa(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  sa(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  sa(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
  sa(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  sa(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
  sa(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &vv);
  fin(d);
  return d;
}
// pointwise; for RELU_BWD: x=dy(grad), b=forward input, y=dx
static D PW(cudnnPointwiseMode_t m, D x, D b, D y, float a2 = 1.f) {
  D p = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  sa(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m);
  sa(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F);
  fin(p);
  D o = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  sa(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, BD, 1, &p);
  if (m == CUDNN_POINTWISE_RELU_BWD) {
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, BD, 1, &x);
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, BD, 1, &b);
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, BD, 1, &y);
  } else {
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, BD, 1, &x);
    if (b)
      sa(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, BD, 1, &b);
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, BD, 1, &y);
  }
  if (a2 != 1.f)
    sa(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &a2);
  fin(o);
  return o;
}
static D CONV(int64_t pad, int64_t str) {
  D c = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t nd = 2, p[2] = {pad, pad}, s[2] = {str, str}, dl[2] = {1, 1};
  cudnnConvolutionMode_t m = CUDNN_CROSS_CORRELATION;
  sa(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd);
  sa(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &F);
  sa(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &m);
  sa(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  sa(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  sa(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s);
  sa(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dl);
  fin(c);
  return c;
}
static D CONVOP(bool wgrad, D conv, D a, D b, D out) {  // dgrad: a=dy b=w out=dx ; wgrad: a=dy b=x out=dw
  D o = mk(wgrad ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
                 : CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  float al = 1.f, be = 0.f;
  if (wgrad) {
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &al);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &be);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, BD, 1, &conv);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, BD, 1, &a);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, BD, 1, &b);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, BD, 1, &out);
  } else {
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &al);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &be);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, BD, 1, &conv);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, BD, 1, &a);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, BD, 1, &b);
    sa(o, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, BD, 1, &out);
  }
  fin(o);
  return o;
}
static D BNW(D x, D mean, D istd, D scale, D dy, D dsc, D dbi, D A, D B, D Cc) {
  D o = mk(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, BD, 1, &x);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, BD, 1, &mean);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, BD, 1, &istd);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, BD, 1, &scale);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, BD, 1, &dy);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, BD, 1, &dsc);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, BD, 1, &dbi);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, BD, 1, &A);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, BD, 1, &B);
  sa(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, BD, 1, &Cc);
  fin(o);
  return o;
}
static D RED(D x, D y, bool det) {
  D r = mk(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnReduceTensorOp_t op = CUDNN_REDUCE_TENSOR_ADD;
  sa(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op);
  sa(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &F);
  if (det) {
    bool t = true;
    sa(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &t);
  }
  fin(r);
  D o = mk(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  sa(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, BD, 1, &x);
  sa(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, BD, 1, &y);
  sa(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, BD, 1, &r);
  fin(o);
  return o;
}
// ---- device buffers: uid -> (ptr, bytes, is_half)
struct Buf {
  int64_t uid;
  void* p;
  size_t n;
  bool half;
};
static unsigned rs = 12345;
static float rnd() {
  rs = rs * 1664525u + 1013904223u;
  return ((rs >> 8) & 0xffff) / 65536.f * 2.f - 1.f;
}
static Buf mkbuf(int64_t uid, size_t n, bool half, std::function<float(size_t)> f = nullptr) {
  Buf b{uid, nullptr, n, half};
  cudaMalloc(&b.p, n * (half ? 2 : 4) + 256);
  if (half) {
    std::vector<__half> h(n);
    for (size_t i = 0; i < n; i++)
      h[i] = __float2half(f ? f(i) : 0.f);
    cudaMemcpy(b.p, h.data(), n * 2, cudaMemcpyHostToDevice);
  } else {
    V h(n);
    for (size_t i = 0; i < n; i++)
      h[i] = f ? f(i) : 0.f;
    cudaMemcpy(b.p, h.data(), n * 4, cudaMemcpyHostToDevice);
  }
  return b;
}
static V get(const Buf& b) {
  V r(b.n);
  if (b.half) {
    std::vector<__half> h(b.n);
    cudaMemcpy(h.data(), b.p, b.n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < b.n; i++)
      r[i] = __half2float(h[i]);
  } else
    cudaMemcpy(r.data(), b.p, b.n * 4, cudaMemcpyDeviceToHost);
  return r;
}
static float relerr(const V& a, const V& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num = fmax(num, fabs(a[i] - b[i]));
    den = fmax(den, fabs(b[i]));
  }
  return (float)(num / (den + 1e-20));
}
// Try every engine global index; for each plan that finalizes, run twice, call check(outputs) and compare bitwise.
static void probe(const char* name, cudnnHandle_t h, std::vector<D> ops, std::vector<Buf>& bufs,
                  std::function<void()> check, int maxplans = 4) {
  printf("== %s\n", name);
  fflush(stdout);
  D g;
  int64_t ne = 0, cnt = 0;
  try {
    g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    sa(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, BD, ops.size(), ops.data());
    sa(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    fin(g);
    CK(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &cnt, &ne));
  } catch (std::exception& e) {
    printf("  graph finalize FAILED: %s\n", e.what());
    return;
  }
  printf("  engine global count %lld\n", (long long)ne);
  // heuristics mode A: which global indices it offers
  try {
    D hr = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    sa(hr, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, BD, 1, &g);
    sa(hr, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
    fin(hr);
    int64_t nc = 0;
    CK(cudnnBackendGetAttribute(hr, CUDNN_ATTR_ENGINEHEUR_RESULTS, BD, 0, &nc, nullptr));
    std::vector<D> cf(nc);
    for (auto& c : cf)
      c = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (nc)
      CK(cudnnBackendGetAttribute(hr, CUDNN_ATTR_ENGINEHEUR_RESULTS, BD, nc, &nc, cf.data()));
    printf("  heurA configs %lld:", (long long)nc);
    for (auto& c : cf) {
      D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      int64_t k;
      CK(cudnnBackendGetAttribute(c, CUDNN_ATTR_ENGINECFG_ENGINE, BD, 1, &k, &e));
      int64_t gi = -1;
      CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k, &gi));
      printf(" %lld", (long long)gi);
    }
    printf("\n");
  } catch (std::exception& e) {
    printf("  heurA FAILED: %s\n", e.what());
  }
  int ok = 0;
  for (int64_t gi = 0; gi < ne && ok < maxplans; gi++) {
    try {
      D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      sa(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, BD, 1, &g);
      sa(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &gi);
      if (cudnnBackendFinalize(e))
        continue;
      int64_t nn = 0, nb = 0;
      cudnnBackendNumericalNote_t nts[16];
      cudnnBackendBehaviorNote_t bns[16];
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nn, nts);
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &nb, bns);
      std::string notes;
      for (int i = 0; i < nn; i++)
        notes += " num" + std::to_string((int)nts[i]);
      for (int i = 0; i < nb; i++)
        notes += " beh" + std::to_string((int)bns[i]);
      D cfg = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      sa(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, BD, 1, &e);
      fin(cfg);
      D pl = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      sa(pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, BD, 1, &cfg);
      sa(pl, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      cudnnStatus_t st = cudnnBackendFinalize(pl);
      if (st) {
        char b[400] = {0};
        cudnnGetLastErrorString(b, sizeof b);
        printf("  engine %lld [%s] plan finalize %s %s\n", (long long)gi, notes.c_str(), cudnnGetErrorString(st), b);
        continue;
      }
      int64_t ws = 0, k;
      CK(cudnnBackendGetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, &ws));
      void* wsp = nullptr;
      if (ws)
        cudaMalloc(&wsp, ws);
      std::vector<int64_t> uids;
      std::vector<void*> ptrs;
      for (auto& b : bufs) {
        uids.push_back(b.uid);
        ptrs.push_back(b.p);
      }
      D vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      sa(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.size(), uids.data());
      sa(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.size(), ptrs.data());
      sa(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp);
      fin(vp);
      CK(cudnnBackendExecute(h, pl, vp));
      cudaDeviceSynchronize();
      std::vector<V> r1;
      for (auto& b : bufs)
        r1.push_back(get(b));
      CK(cudnnBackendExecute(h, pl, vp));
      cudaError_t ce = cudaDeviceSynchronize();
      bool same = true;
      for (size_t i = 0; i < bufs.size(); i++) {
        V r2 = get(bufs[i]);
        if (memcmp(r1[i].data(), r2.data(), r2.size() * 4))
          same = false;
      }
      cudaEvent_t a, z;
      cudaEventCreate(&a);
      cudaEventCreate(&z);
      cudaEventRecord(a);
      for (int i = 0; i < 20; i++)
        cudnnBackendExecute(h, pl, vp);
      cudaEventRecord(z);
      cudaEventSynchronize(z);
      float ms;
      cudaEventElapsedTime(&ms, a, z);
      printf("  engine %lld [%s] OK ws=%lld %s run2-bitwise-same=%d %.1f us/iter\n   ", (long long)gi, notes.c_str(),
             (long long)ws, cudaGetErrorString(ce), (int)same, ms * 50);
      check();
      ok++;
      if (wsp)
        cudaFree(wsp);
    } catch (std::exception& ex) {
      printf("  engine %lld error %s\n", (long long)gi, ex.what());
    }
  }
  if (!ok)
    printf("  NO engine ran\n");
  fflush(stdout);
}
// ---------------- tests
static int N = 8, HH = 28, WW = 28;
static void test_dgrad(cudnnHandle_t h, int Cc, int K, int R, int str, int meanmode /*0 add a2=-1, 1 sub*/,
                       bool genred) {
  int pad = R / 2, P = (HH + 2 * pad - R) / str + 1, Q = (WW + 2 * pad - R) / str + 1;
  size_t M = (size_t)N * HH * WW;
  std::vector<Buf> bufs;
  bufs.push_back(mkbuf(1, (size_t)N * K * P * Q, true, [](size_t) { return rnd(); }));          // dy
  bufs.push_back(mkbuf(2, (size_t)K * Cc * R * R, true, [](size_t) { return rnd() * 0.2f; }));  // W
  bufs.push_back(mkbuf(3, M * Cc, true, [](size_t) { return rnd() * 2.f; }));                   // x (BN input)
  bufs.push_back(mkbuf(4, Cc, false, [](size_t i) { return 0.1f * (i % 5) - 0.2f; }));          // mean
  bufs.push_back(mkbuf(5, Cc, false, [](size_t i) { return 0.5f + 0.05f * (i % 7); }));         // invstd
  bufs.push_back(mkbuf(6, Cc, false, [](size_t i) { return 0.8f + 0.03f * (i % 9); }));         // gamma
  bufs.push_back(mkbuf(7, Cc, false, [](size_t i) { return 0.05f * (i % 4) - 0.1f; }));         // beta
  bufs.push_back(mkbuf(8, M * Cc, true));                                                       // g (drelu out)
  if (!genred)
    for (int i = 0; i < 5; i++)
      bufs.push_back(mkbuf(9 + i, Cc, false));  // dscale dbias A B C
  else
    bufs.push_back(mkbuf(9, Cc, false));  // reduction sum(g)
  try {
    D dy = T(1, H, N, K, P, Q), w = T(2, H, K, Cc, R, R), x = T(3, H, N, Cc, HH, WW), mean = T(4, F, 1, Cc, 1, 1),
      istd = T(5, F, 1, Cc, 1, 1), gam = T(6, F, 1, Cc, 1, 1), bet = T(7, F, 1, Cc, 1, 1), g = T(8, H, N, Cc, HH, WW);
    D v1 = T(101, F, N, Cc, HH, WW, true), v2 = T(102, F, N, Cc, HH, WW, true), v3 = T(103, F, N, Cc, HH, WW, true),
      v4 = T(104, F, N, Cc, HH, WW, true), v5 = T(105, F, N, Cc, HH, WW, true);
    std::vector<D> ops = {CONVOP(false, CONV(pad, str), dy, w, v1),
                          meanmode ? PW(CUDNN_POINTWISE_SUB, x, mean, v2) : PW(CUDNN_POINTWISE_ADD, x, mean, v2, -1.f),
                          PW(CUDNN_POINTWISE_MUL, v2, istd, v3),
                          PW(CUDNN_POINTWISE_MUL, v3, gam, v4),
                          PW(CUDNN_POINTWISE_ADD, v4, bet, v5),
                          PW(CUDNN_POINTWISE_RELU_BWD, v1, v5, g)};
    if (!genred)
      ops.push_back(BNW(x, mean, istd, gam, g, T(9, F, 1, Cc, 1, 1), T(10, F, 1, Cc, 1, 1), T(11, F, 1, Cc, 1, 1),
                        T(12, F, 1, Cc, 1, 1), T(13, F, 1, Cc, 1, 1)));
    else
      ops.push_back(RED(g, T(9, F, 1, Cc, 1, 1), false));
    char nm[200];
    snprintf(nm, sizeof nm, "%s C=%d K=%d %dx%d stride %d mean-%s N=%d HW=%d",
             genred ? "dgrad+drelu+REDUCTION(sum g)" : "dgrad+drelu+BNBwdWeight", Cc, K, R, R, str,
             meanmode ? "SUB" : "ADD(a2=-1)", N, HH);
    probe(nm, h, ops, bufs, [&]() {
      V dyv = get(bufs[0]), wv = get(bufs[1]), xv = get(bufs[2]), mv = get(bufs[3]), iv = get(bufs[4]),
        gm = get(bufs[5]), bt = get(bufs[6]), gv = get(bufs[7]);
      V gref(M * Cc);  // reference dgrad + drelu
      for (int n = 0; n < N; n++)
        for (int y = 0; y < HH; y++)
          for (int xx = 0; xx < WW; xx++)
            for (int c = 0; c < Cc; c++) {
              double s = 0;
              for (int r = 0; r < R; r++)
                for (int t = 0; t < R; t++) {
                  int py = y + pad - r, qx = xx + pad - t;
                  if (py % str || qx % str)
                    continue;
                  py /= str;
                  qx /= str;
                  if (py < 0 || py >= P || qx < 0 || qx >= Q)
                    continue;
                  for (int k = 0; k < K; k++)
                    s += dyv[((size_t)(n * P + py) * Q + qx) * K + k] * wv[((size_t)(k * R + r) * R + t) * Cc + c];
                }
              size_t i = ((size_t)(n * HH + y) * WW + xx) * Cc + c;
              float bn = (xv[i] - mv[c]) * iv[c] * gm[c] + bt[c];
              gref[i] = bn > 0 ? (float)s : 0.f;
            }
      printf("g relerr %.2e", relerr(gv, gref));
      V sg(Cc, 0), sgx(Cc, 0);
      for (size_t i = 0; i < M * Cc; i++) {
        int c = i % Cc;
        sg[c] += gv[i];
        sgx[c] += gv[i] * (xv[i] - mv[c]) * iv[c];
      }
      if (genred) {
        printf(" | red sum(g) relerr %.2e\n", relerr(get(bufs[8]), sg));
        return;
      }
      V A(Cc), B(Cc), Cr(Cc);
      for (int c = 0; c < Cc; c++) {
        A[c] = gm[c] * iv[c];
        B[c] = -A[c] * iv[c] * sgx[c] / M;
        Cr[c] = -A[c] * sg[c] / M - B[c] * mv[c];
      }
      printf(" | dscale %.2e dbias %.2e | A=g*istd %.2e B=-A*istd*dscale/M %.2e C=-A*dbias/M-B*mean %.2e\n",
             relerr(get(bufs[8]), sgx), relerr(get(bufs[9]), sg), relerr(get(bufs[10]), A), relerr(get(bufs[11]), B),
             relerr(get(bufs[12]), Cr));
    });
  } catch (std::exception& e) {
    printf("  build FAILED: %s\n", e.what());
  }
  for (auto& b : bufs)
    cudaFree(b.p);
}
static void test_wgrad(cudnnHandle_t h, int Cc, int K, int R, int str, bool prologue, cudnnDataType_t vdt,
                       cudnnDataType_t sbdt) {
  int pad = R / 2, P = (HH + 2 * pad - R) / str + 1, Q = (WW + 2 * pad - R) / str + 1;
  std::vector<Buf> bufs;
  bufs.push_back(mkbuf(1, (size_t)N * K * P * Q, true, [](size_t) { return rnd(); }));
  bufs.push_back(mkbuf(2, (size_t)N * HH * WW * Cc, true, [](size_t) { return rnd() * 2.f; }));
  bufs.push_back(mkbuf(3, Cc, sbdt == H, [](size_t i) { return 0.5f + 0.05f * (i % 7); }));
  bufs.push_back(mkbuf(4, Cc, sbdt == H, [](size_t i) { return 0.05f * (i % 5) - 0.1f; }));
  bufs.push_back(mkbuf(5, (size_t)K * Cc * R * R, true));
  if (!prologue) {
    bufs.erase(bufs.begin() + 2, bufs.begin() + 4);
  }
  try {
    D dy = T(1, H, N, K, P, Q), x = T(2, H, N, Cc, HH, WW), dw = T(5, H, K, Cc, R, R);
    std::vector<D> ops;
    if (prologue) {
      D s = T(3, sbdt, 1, Cc, 1, 1), b = T(4, sbdt, 1, Cc, 1, 1), v1 = T(101, vdt, N, Cc, HH, WW, true),
        v2 = T(102, vdt, N, Cc, HH, WW, true), v3 = T(103, vdt, N, Cc, HH, WW, true);
      ops = {PW(CUDNN_POINTWISE_MUL, x, s, v1), PW(CUDNN_POINTWISE_ADD, v1, b, v2),
             PW(CUDNN_POINTWISE_RELU_FWD, v2, nullptr, v3), CONVOP(true, CONV(pad, str), dy, v3, dw)};
    } else
      ops = {CONVOP(true, CONV(pad, str), dy, x, dw)};
    char nm[200];
    snprintf(nm, sizeof nm, "%s wgrad C=%d K=%d %dx%d stride %d virt=%s scale/bias=%s",
             prologue ? "scale+bias+relu ->" : "plain", Cc, K, R, R, str, vdt == H ? "f16" : "f32",
             sbdt == H ? "f16" : "f32");
    probe(nm, h, ops, bufs, [&]() {
      V dyv = get(bufs[0]), xv = get(bufs[1]), dwv = get(bufs.back());
      V sv(Cc, 1), bv(Cc, 0);
      if (prologue) {
        sv = get(bufs[2]);
        bv = get(bufs[3]);
      }
      V ref((size_t)K * Cc * R * R, 0);
      for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
          for (int q = 0; q < Q; q++)
            for (int r = 0; r < R; r++)
              for (int t = 0; t < R; t++) {
                int y = p * str - pad + r, xx = q * str - pad + t;
                if (y < 0 || y >= HH || xx < 0 || xx >= WW)
                  continue;
                const float* d = &dyv[((size_t)(n * P + p) * Q + q) * K];
                const float* xi = &xv[((size_t)(n * HH + y) * WW + xx) * Cc];
                for (int c = 0; c < Cc; c++) {
                  float a = prologue ? fmaxf(xi[c] * sv[c] + bv[c], 0.f) : xi[c];
                  if (a == 0.f)
                    continue;
                  for (int k = 0; k < K; k++)
                    ref[((size_t)(k * R + r) * R + t) * Cc + c] += d[k] * a;
                }
              }
      printf("dw relerr %.2e\n", relerr(dwv, ref));
    });
  } catch (std::exception& e) {
    printf("  build FAILED: %s\n", e.what());
  }
  for (auto& b : bufs)
    cudaFree(b.p);
}
static void test_apply(cudnnHandle_t h, int Cc, bool bcast_first) {
  size_t M = (size_t)N * HH * WW;
  std::vector<Buf> bufs;
  bufs.push_back(mkbuf(1, M * Cc, true, [](size_t) { return rnd(); }));
  bufs.push_back(mkbuf(2, M * Cc, true, [](size_t) { return rnd(); }));
  for (int i = 0; i < 3; i++)
    bufs.push_back(mkbuf(3 + i, Cc, false, [](size_t j) { return rnd(); }));
  bufs.push_back(mkbuf(6, M * Cc, true));
  try {
    D dy = T(1, H, N, Cc, HH, WW), x = T(2, H, N, Cc, HH, WW), A = T(3, F, 1, Cc, 1, 1), B = T(4, F, 1, Cc, 1, 1),
      Cd = T(5, F, 1, Cc, 1, 1), dx = T(6, H, N, Cc, HH, WW);
    D v1 = T(101, F, N, Cc, HH, WW, true), v2 = T(102, F, N, Cc, HH, WW, true), v3 = T(103, F, N, Cc, HH, WW, true);
    std::vector<D> ops = {bcast_first ? PW(CUDNN_POINTWISE_MUL, A, dy, v1) : PW(CUDNN_POINTWISE_MUL, dy, A, v1),
                          bcast_first ? PW(CUDNN_POINTWISE_MUL, B, x, v2) : PW(CUDNN_POINTWISE_MUL, x, B, v2),
                          PW(CUDNN_POINTWISE_ADD, v1, v2, v3), PW(CUDNN_POINTWISE_ADD, v3, Cd, dx)};
    char nm[120];
    snprintf(nm, sizeof nm, "dBNApply dx=A*dy+B*x+C C=%d %s", Cc,
             bcast_first ? "(broadcast operand first)" : "(full tensor first)");
    probe(
        nm, h, ops, bufs,
        [&]() {
          V a = get(bufs[0]), b = get(bufs[1]), A = get(bufs[2]), B = get(bufs[3]), Cv = get(bufs[4]), o = get(bufs[5]),
            r(M * Cc);
          for (size_t i = 0; i < M * Cc; i++) {
            int c = i % Cc;
            r[i] = A[c] * a[i] + B[c] * b[i] + Cv[c];
          }
          printf("dx relerr %.2e\n", relerr(o, r));
        },
        2);
  } catch (std::exception& e) {
    printf("  build FAILED: %s\n", e.what());
  }
  for (auto& b : bufs)
    cudaFree(b.p);
}
int main(int argc, char** argv) {
  cudaDeviceProp pr;
  cudaGetDeviceProperties(&pr, 0);
  printf("GPU %s sm_%d%d cuDNN %zu\n", pr.name, pr.major, pr.minor, cudnnGetVersion());
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  std::string which = argc > 1 ? argv[1] : "all";
  if (which == "all" || which == "d") {
    test_dgrad(h, 64, 64, 3, 1, 0, false);
    test_dgrad(h, 64, 64, 3, 1, 1, false);
    test_dgrad(h, 256, 64, 1, 1, 0, false);
    test_dgrad(h, 64, 128, 1, 2, 0, false);
    test_dgrad(h, 64, 128, 3, 2, 0, false);
    test_dgrad(h, 24, 64, 3, 1, 0, false);
    test_dgrad(h, 64, 64, 3, 1, 0, true);
    test_dgrad(h, 64, 128, 3, 2, 0, true);
  }
  if (which == "all" || which == "w") {
    test_wgrad(h, 64, 64, 3, 1, true, F, H);
    test_wgrad(h, 64, 64, 3, 1, true, H, H);
    test_wgrad(h, 64, 64, 3, 1, true, F, F);
    test_wgrad(h, 256, 64, 1, 1, true, F, H);
    test_wgrad(h, 64, 128, 3, 2, true, F, H);
    test_wgrad(h, 64, 128, 1, 2, true, F, H);
    test_wgrad(h, 64, 64, 3, 1, false, F, H);
  }
  if (which == "all" || which == "a") {
    test_apply(h, 64, false);
    test_apply(h, 64, true);
  }
  printf("done\n");
}
