// Device probe (not part of trctl; RESULTS.md records what it prints): how fast cuDNN's graph (backend) API runs a
// plain convolution when every engine config it offers is measured, against the legacy API's best algorithm
// (cudnnFind*Ex over all algorithms, what `trctl bench --autotune` measures today and the training step runs).
// Question it answers: do the legacy algorithms leave convolution time on the table on this GPU (the backend API
// exposes engines and knob settings — tile sizes, split-K, CTA swizzles — that the legacy algorithm ids map onto
// only one heuristic pick of)?
//
// Per geometry (NHWC f16, fp32 accumulation, KRSC filters) and direction (fwd, dgrad, wgrad):
//   legacy   cudnnFind*Ex, tensor-op math, non-deterministic algorithms allowed; the fastest status-ok algorithm is
//            then re-timed with this probe's own loop (same warm-up and repetitions as the engine configs)
//   engines  the configs of heuristics A, B and FALLBACK (deduplicated by engine index + knob choices) plus, with
//            --scan, every engine index with its default knobs; each config whose plan finalizes within the
//            workspace limit is timed (2 warm-up runs, --reps timed runs between two events, mean)
//   check    the fastest engine config's output against the legacy algorithm's (max |diff| / max |ref|)
// Output: one line per config tried, then a summary line per (geometry, direction) and a total: the legacy sum,
// the best-engine sum and the sum of per-direction minima (what an autotune over both would give).
//
// Usage: cudnn_conv_engine_probe [--set vgg|resnet50|all] [--n 256] [--reps 10] [--max-ws-mb 512] [--scan]
//                                [--deadline S] [--dirs fwd,dgrad,wgrad]
// Built by CMake with TRCTL_CUDA (target cudnn_conv_engine_probe); tools/device_pack.sh carries it; device_run.sh
// stage `convprobe`. Written for one-off measurement: compact, its CK() macro only adds the line to cuDNN errors.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

typedef cudnnBackendDescriptor_t D;
static void ck(cudnnStatus_t s, int l) {
  if (s) {
    char b[600] = {0};
    cudnnGetLastErrorString(b, sizeof b);
    throw std::runtime_error(std::string(cudnnGetErrorString(s)) + " @" + std::to_string(l) + " " + b);
  }
}
static void cuck(cudaError_t e, int l) {
  if (e) throw std::runtime_error(std::string(cudaGetErrorString(e)) + " @" + std::to_string(l));
}
#define CK(x) ck((x), __LINE__)
#define CU(x) cuck((x), __LINE__)
#define BD CUDNN_TYPE_BACKEND_DESCRIPTOR

// Every descriptor this probe creates, destroyed at the end of one (geometry, direction).
struct Pool {
  std::vector<D> all;
  ~Pool() {
    for (auto it = all.rbegin(); it != all.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  D mk(cudnnBackendDescriptorType_t t) {
    D d;
    CK(cudnnBackendCreateDescriptor(t, &d));
    all.push_back(d);
    return d;
  }
};
static void sa(D d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  CK(cudnnBackendSetAttribute(d, a, t, n, v));
}

struct Geom {
  const char* name;
  int64_t n, h, w, c, k, r, s, stride, pad;
  int64_t p() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t q() const { return (w + 2 * pad - s) / stride + 1; }
};
enum Dir { kFwd = 0, kDgrad = 1, kWgrad = 2 };
static const char* dir_name(int d) { return d == kFwd ? "fwd" : d == kDgrad ? "dgrad" : "wgrad"; }

// (N, C, H, W) dims, NHWC strides; filters (K, C, R, S) with KRSC strides.
static D tensor(Pool& P, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  D d = P.mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t dt = CUDNN_DATA_HALF;
  int64_t dims[4] = {n, c, h, w}, st[4] = {c * h * w, 1, w * c, c}, al = 16;
  bool v = false;
  sa(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  sa(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  sa(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
  sa(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  sa(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
  sa(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
  CK(cudnnBackendFinalize(d));
  return d;
}

// The one-operation graph of direction `dir` (uids: 1 = x/dx, 2 = w/dw, 3 = y/dy).
static D op_graph(Pool& P, cudnnHandle_t h, const Geom& g, int dir) {
  D x = tensor(P, 1, g.n, g.c, g.h, g.w), w = tensor(P, 2, g.k, g.c, g.r, g.s);
  D y = tensor(P, 3, g.n, g.k, g.p(), g.q());
  D conv = P.mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t nd = 2, pad[2] = {g.pad, g.pad}, str[2] = {g.stride, g.stride}, dil[2] = {1, 1};
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t m = CUDNN_CROSS_CORRELATION;
  sa(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd);
  sa(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  sa(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &m);
  sa(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  sa(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  sa(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  sa(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  CK(cudnnBackendFinalize(conv));
  float al = 1.f, be = 0.f;
  D op;
  if (dir == kFwd) {
    op = P.mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &al);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &be);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, BD, 1, &conv);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, BD, 1, &x);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, BD, 1, &w);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, BD, 1, &y);
  } else if (dir == kDgrad) {
    op = P.mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &al);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &be);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, BD, 1, &conv);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, BD, 1, &y);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, BD, 1, &w);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, BD, 1, &x);
  } else {
    op = P.mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &al);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &be);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, BD, 1, &conv);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, BD, 1, &y);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, BD, 1, &x);
    sa(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, BD, 1, &w);
  }
  CK(cudnnBackendFinalize(op));
  D og = P.mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  sa(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  sa(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, BD, 1, &op);
  CK(cudnnBackendFinalize(og));
  return og;
}

// Engine index, knobs and notes of a config.
struct CfgInfo {
  int64_t engine = -1;
  std::string knobs, notes;
};
static CfgInfo cfg_info(Pool& P, D cfg) {
  CfgInfo r;
  D e = P.mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, BD, 1, &n, &e) != CUDNN_STATUS_SUCCESS) return r;
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &r.engine);
  cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, nn) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) {
      const char* s = nn[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE                  ? "tc"
                      : nn[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC          ? "nondet"
                      : nn[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ? "REDUCED"
                      : nn[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS       ? "downconv"
                      : nn[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD                  ? "winograd"
                      : nn[i] == CUDNN_NUMERICAL_NOTE_FFT                       ? "fft"
                                                                                 : "note?";
      r.notes += std::string(r.notes.empty() ? "" : ",") + s;
    }
  }
  cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bn) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i)
      if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) r.notes += std::string(r.notes.empty() ? "" : ",") + "rtc";
  }
  std::vector<D> ch;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) ch.push_back(P.mk(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, BD, CUDNN_KNOB_TYPE_COUNTS, &n, ch.data()) ==
      CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n && i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
      cudnnBackendKnobType_t t{};
      int64_t v = 0, got = 0;
      cudnnBackendGetAttribute(ch[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &t);
      cudnnBackendGetAttribute(ch[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &v);
      r.knobs += (r.knobs.empty() ? "" : " ") + std::to_string(static_cast<int>(t)) + "=" + std::to_string(v);
    }
  }
  return r;
}

// The configs of one heuristic mode (empty when it yields none or fails).
static std::vector<D> heuristic(Pool& P, D og, cudnnBackendHeurMode_t mode) {
  std::vector<D> out;
  D heur = P.mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  sa(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, BD, 1, &og);
  sa(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) return out;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, BD, 0, &count, nullptr) != CUDNN_STATUS_SUCCESS)
    return out;
  std::vector<D> cfgs;
  for (int64_t i = 0; i < count; ++i) cfgs.push_back(P.mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t got = 0;
  if (count > 0 &&
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, BD, count, &got, cfgs.data()) ==
          CUDNN_STATUS_SUCCESS)
    out.assign(cfgs.begin(), cfgs.begin() + std::min(got, count));
  return out;
}

// Every engine index with its default knobs (those that accept the graph).
static std::vector<D> scan(Pool& P, D og) {
  std::vector<D> out;
  int64_t count = 0, n = 0;
  if (cudnnBackendGetAttribute(og, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &count) !=
      CUDNN_STATUS_SUCCESS)
    return out;
  for (int64_t i = 0; i < count; ++i) {
    D e = P.mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, BD, 1, &og) ||
        cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i) ||
        cudnnBackendFinalize(e))
      continue;
    D c = P.mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (cudnnBackendSetAttribute(c, CUDNN_ATTR_ENGINECFG_ENGINE, BD, 1, &e) || cudnnBackendFinalize(c)) continue;
    out.push_back(c);
  }
  return out;
}

struct Bufs {
  void *x = nullptr, *w = nullptr, *y = nullptr, *ref = nullptr, *ws = nullptr;
  size_t x_n = 0, w_n = 0, y_n = 0, ws_bytes = 0;
};
// Output of direction `dir` (what the check compares) and its element count.
static void* out_of(const Bufs& b, int dir, size_t& n) {
  n = dir == kFwd ? b.y_n : dir == kDgrad ? b.x_n : b.w_n;
  return dir == kFwd ? b.y : dir == kDgrad ? b.x : b.w;
}

// Small pseudo-random values (|v| <= 0.25), the same 1 Mi-element pattern repeated, seeded per tensor.
static void fill(void* p, size_t n, unsigned seed) {
  const size_t chunk = size_t{1} << 20;
  std::vector<__half> h(chunk);
  unsigned v = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < chunk; ++i) {
    v = v * 1664525u + 1013904223u;
    h[i] = __float2half(((v >> 8 & 0xffff) / 65536.f - 0.5f) * 0.5f);
  }
  for (size_t off = 0; off < n; off += chunk)
    CU(cudaMemcpy(static_cast<__half*>(p) + off, h.data(), std::min(chunk, n - off) * 2, cudaMemcpyHostToDevice));
}

// Mean ms of `reps` runs of f after 2 warm-up runs; with cutoff > 0, one timed run first, and its time alone when
// it exceeds cutoff (FALLBACK engines ran up to 2 s a call on VGG's layers: H100 run 57).
template <class F>
static float time_ms(F&& f, int reps, float cutoff = 0) {
  f();
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  if (cutoff > 0) {
    CU(cudaEventRecord(a));
    f();
    CU(cudaEventRecord(b));
    CU(cudaEventSynchronize(b));
    float one = 0;
    CU(cudaEventElapsedTime(&one, a, b));
    if (one > cutoff) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      return one;
    }
  } else {
    f();
  }
  CU(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CU(cudaEventRecord(b));
  CU(cudaEventSynchronize(b));
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

static float max_rel_diff(const void* a, const void* ref, size_t n) {
  std::vector<__half> ha(n), hr(n);
  CU(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hr.data(), ref, n * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = __half2float(ha[i]), r = __half2float(hr[i]);
    if (!std::isfinite(x)) return INFINITY;
    num = std::max(num, std::fabs(x - r));
    den = std::max(den, std::fabs(r));
  }
  return static_cast<float>(num / (den + 1e-30));
}

struct Legacy {
  int algo = -1;
  float find_ms = 0, ms = 0;
  size_t ws = 0;
};

// The fastest status-ok result of a cudnnFind*Ex that fits the workspace; cd gets its math type.
template <class Perf>
static Legacy first_ok(const Perf* r, int got, size_t ws_bytes, cudnnConvolutionDescriptor_t cd) {
  for (int i = 0; i < got; ++i)
    if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= ws_bytes) {
      cudnnSetConvolutionMathType(cd, r[i].mathType);
      return {static_cast<int>(r[i].algo), r[i].time, 0, r[i].memory};
    }
  throw std::runtime_error("no legacy algorithm ran");
}

// cudnnFind*Ex over every algorithm, then this probe's own timing of the fastest status-ok one; leaves its output
// in b.ref.
static Legacy legacy(cudnnHandle_t h, const Geom& g, int dir, Bufs& b, int reps) {
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w));
  CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, g.n, g.k, g.p(), g.q()));
  CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, g.k, g.c, g.r, g.s));
  CK(cudnnSetConvolution2dDescriptor(cd, g.pad, g.pad, g.stride, g.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  CK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
  Legacy L;
  const float one = 1.f, zero = 0.f;
  size_t n = 0;
  void* out = out_of(b, dir, n);
  if (dir == kFwd) {
    cudnnConvolutionFwdAlgoPerf_t r[16];
    int got = 0;
    CK(cudnnFindConvolutionForwardAlgorithmEx(h, xd, b.x, wd, b.w, cd, yd, b.y, 16, &got, r, b.ws, b.ws_bytes));
    L = first_ok(r, got, b.ws_bytes, cd);
    L.ms = time_ms([&] {
      CK(cudnnConvolutionForward(h, &one, xd, b.x, wd, b.w, cd, (cudnnConvolutionFwdAlgo_t)L.algo, b.ws, b.ws_bytes,
                                 &zero, yd, b.y));
    }, reps);
  } else if (dir == kDgrad) {
    cudnnConvolutionBwdDataAlgoPerf_t r[16];
    int got = 0;
    CK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd, b.w, yd, b.y, cd, xd, b.x, 16, &got, r, b.ws, b.ws_bytes));
    L = first_ok(r, got, b.ws_bytes, cd);
    L.ms = time_ms([&] {
      CK(cudnnConvolutionBackwardData(h, &one, wd, b.w, yd, b.y, cd, (cudnnConvolutionBwdDataAlgo_t)L.algo, b.ws,
                                      b.ws_bytes, &zero, xd, b.x));
    }, reps);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[16];
    int got = 0;
    CK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd, b.x, yd, b.y, cd, wd, b.w, 16, &got, r, b.ws,
                                                     b.ws_bytes));
    L = first_ok(r, got, b.ws_bytes, cd);
    L.ms = time_ms([&] {
      CK(cudnnConvolutionBackwardFilter(h, &one, xd, b.x, yd, b.y, cd, (cudnnConvolutionBwdFilterAlgo_t)L.algo, b.ws,
                                        b.ws_bytes, &zero, wd, b.w));
    }, reps);
  }
  CU(cudaMemcpy(b.ref, out, n * 2, cudaMemcpyDeviceToDevice));
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return L;
}

struct Best {
  float ms = INFINITY;
  std::string what;
};

// Every engine config of the graph timed; the fastest one's output checked against b.ref.
static Best engines(cudnnHandle_t h, const Geom& g, int dir, Bufs& b, int reps, bool do_scan, double deadline_s,
                    std::chrono::steady_clock::time_point t0, float legacy_ms) {
  Pool P;
  D og = op_graph(P, h, g, dir);
  struct Cand {
    D cfg;
    const char* src;
    int rank;
  };
  std::vector<Cand> cands;
  const std::pair<cudnnBackendHeurMode_t, const char*> modes[3] = {
      {CUDNN_HEUR_MODE_A, "A"}, {CUDNN_HEUR_MODE_B, "B"}, {CUDNN_HEUR_MODE_FALLBACK, "F"}};
  for (auto& m : modes) {
    std::vector<D> c = heuristic(P, og, m.first);
    for (size_t i = 0; i < c.size(); ++i) cands.push_back({c[i], m.second, static_cast<int>(i)});
  }
  if (do_scan) {
    std::vector<D> c = scan(P, og);
    for (size_t i = 0; i < c.size(); ++i) cands.push_back({c[i], "scan", static_cast<int>(i)});
  }
  std::map<std::string, int> seen;
  Best best;
  D best_plan = nullptr;
  int64_t uids[3] = {1, 2, 3};
  void* ptrs[3] = {b.x, b.w, b.y};
  for (const Cand& c : cands) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (deadline_s > 0 && el > deadline_s) {
      printf("    deadline reached: remaining configs not tried\n");
      break;
    }
    CfgInfo ci = cfg_info(P, c.cfg);
    const std::string key = std::to_string(ci.engine) + " [" + ci.knobs + "]";
    if (seen.count(key)) continue;
    seen[key] = 1;
    char label[64];
    snprintf(label, sizeof label, "%s#%d", c.src, c.rank);
    D plan = P.mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    sa(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    sa(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, BD, 1, &c.cfg);
    const auto f0 = std::chrono::steady_clock::now();
    cudnnStatus_t st = cudnnBackendFinalize(plan);
    const double fin_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
    if (st != CUDNN_STATUS_SUCCESS) {
      printf("    %-7s engine %3ld [%s] (%s): plan refused: %s\n", label, (long)ci.engine, ci.knobs.c_str(),
             ci.notes.c_str(), cudnnGetErrorString(st));
      continue;
    }
    int64_t ws = 0, n = 0;
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
    if (ws > static_cast<int64_t>(b.ws_bytes)) {
      printf("    %-7s engine %3ld [%s] (%s): workspace %ld B over the limit\n", label, (long)ci.engine,
             ci.knobs.c_str(), ci.notes.c_str(), (long)ws);
      continue;
    }
    D pack = P.mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.ws);
    CK(cudnnBackendFinalize(pack));
    float ms = INFINITY;
    std::string err;
    try {
      ms = time_ms([&] { CK(cudnnBackendExecute(h, plan, pack)); }, reps, 3.0f * legacy_ms);
    } catch (const std::exception& e) {
      err = e.what();
      cudaGetLastError();
    }
    if (!err.empty()) {
      printf("    %-7s engine %3ld [%s] (%s): execute failed: %s\n", label, (long)ci.engine, ci.knobs.c_str(),
             ci.notes.c_str(), err.c_str());
      continue;
    }
    printf("    %-7s engine %3ld [%s] (%s): %.4f ms, ws %ld B, finalize %.2f s\n", label, (long)ci.engine,
           ci.knobs.c_str(), ci.notes.c_str(), ms, (long)ws, fin_s);
    if (ms < best.ms) {
      best.ms = ms;
      best.what = std::string(label) + " engine " + std::to_string(ci.engine) + " [" + ci.knobs + "] (" + ci.notes +
                  ")";
      best_plan = plan;
    }
  }
  if (best_plan) {  // rerun the best into the output buffer and check it
    D pack = P.mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    sa(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.ws);
    CK(cudnnBackendFinalize(pack));
    CK(cudnnBackendExecute(h, best_plan, pack));
    CU(cudaDeviceSynchronize());
    size_t n = 0;
    void* out = out_of(b, dir, n);
    char chk[64];
    snprintf(chk, sizeof chk, ", max|diff|/max|ref| vs legacy %.2e", max_rel_diff(out, b.ref, n));
    best.what += chk;
  }
  return best;
}

static std::vector<Geom> geoms(const std::string& set, int64_t n) {
  std::vector<Geom> v;
  if (set == "vgg" || set == "all") {
    const int64_t t[8][3] = {{224, 64, 64},  {112, 64, 128}, {112, 128, 128}, {56, 128, 256},
                             {56, 256, 256}, {28, 256, 512}, {28, 512, 512},  {14, 512, 512}};
    static const char* names[8] = {"vgg 224 64-64",  "vgg 112 64-128", "vgg 112 128-128", "vgg 56 128-256",
                                   "vgg 56 256-256", "vgg 28 256-512", "vgg 28 512-512",  "vgg 14 512-512"};
    for (int i = 0; i < 8; ++i) v.push_back({names[i], n, t[i][0], t[i][0], t[i][1], t[i][2], 3, 3, 1, 1});
  }
  if (set == "resnet50" || set == "all") {
    v.push_back({"r50 56 64-64 1x1", n, 56, 56, 64, 64, 1, 1, 1, 0});
    v.push_back({"r50 56 64-64 3x3", n, 56, 56, 64, 64, 3, 3, 1, 1});
    v.push_back({"r50 56 64-256 1x1", n, 56, 56, 64, 256, 1, 1, 1, 0});
    v.push_back({"r50 56 256-64 1x1", n, 56, 56, 256, 64, 1, 1, 1, 0});
    v.push_back({"r50 28 128-128 3x3", n, 28, 28, 128, 128, 3, 3, 1, 1});
    v.push_back({"r50 56 128-128 3x3/2", n, 56, 56, 128, 128, 3, 3, 2, 1});
    v.push_back({"r50 28 512-128 1x1", n, 28, 28, 512, 128, 1, 1, 1, 0});
    v.push_back({"r50 14 256-256 3x3", n, 14, 14, 256, 256, 3, 3, 1, 1});
    v.push_back({"r50 14 1024-256 1x1", n, 14, 14, 1024, 256, 1, 1, 1, 0});
    v.push_back({"r50 7 512-512 3x3", n, 7, 7, 512, 512, 3, 3, 1, 1});
    v.push_back({"r50 7 2048-512 1x1", n, 7, 7, 2048, 512, 1, 1, 1, 0});
  }
  return v;
}

int main(int argc, char** argv) {
  std::string set = "vgg", dirs = "fwd,dgrad,wgrad";
  int64_t n = 256;
  int reps = 10;
  size_t max_ws_mb = 512;
  bool do_scan = false;
  double deadline = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--set") set = v, ++i;
    else if (a == "--n") n = std::atol(v), ++i;
    else if (a == "--reps") reps = std::atoi(v), ++i;
    else if (a == "--max-ws-mb") max_ws_mb = std::atol(v), ++i;
    else if (a == "--deadline") deadline = std::atof(v), ++i;
    else if (a == "--dirs") dirs = v, ++i;
    else if (a == "--scan") do_scan = true;
    else {
      fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    cudaDeviceProp pr;
    CU(cudaGetDeviceProperties(&pr, 0));
    printf("GPU %s sm_%d%d cuDNN %zu, N=%ld, %d reps, workspace <= %zu MB, scan %s\n", pr.name, pr.major, pr.minor,
           cudnnGetVersion(), (long)n, reps, max_ws_mb, do_scan ? "on" : "off");
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    double sum_legacy = 0, sum_engine = 0, sum_min = 0;
    for (const Geom& g : geoms(set, n)) {
      Bufs b;
      b.x_n = size_t(g.n) * g.h * g.w * g.c;
      b.w_n = size_t(g.k) * g.r * g.s * g.c;
      b.y_n = size_t(g.n) * g.p() * g.q() * g.k;
      b.ws_bytes = max_ws_mb << 20;
      const size_t ref_n = std::max({b.x_n, b.w_n, b.y_n});
      CU(cudaMalloc(&b.x, b.x_n * 2));
      CU(cudaMalloc(&b.w, b.w_n * 2));
      CU(cudaMalloc(&b.y, b.y_n * 2));
      CU(cudaMalloc(&b.ref, ref_n * 2));
      CU(cudaMalloc(&b.ws, b.ws_bytes));
      for (int dir = 0; dir < 3; ++dir) {
        if (dirs.find(dir_name(dir)) == std::string::npos) continue;
        // Inputs fresh for every direction (the previous direction overwrote one of them).
        fill(b.x, b.x_n, 1);
        fill(b.w, b.w_n, 2);
        fill(b.y, b.y_n, 3);
        CU(cudaDeviceSynchronize());
        printf("%s N=%ld %ldx%ld C=%ld K=%ld %ldx%ld/%ld %s\n", g.name, (long)g.n, (long)g.h, (long)g.w, (long)g.c,
               (long)g.k, (long)g.r, (long)g.s, (long)g.stride, dir_name(dir));
        Legacy L;
        try {
          L = legacy(h, g, dir, b, reps);
        } catch (const std::exception& e) {
          printf("    legacy failed: %s\n", e.what());
          cudaGetLastError();
          continue;
        }
        printf("    legacy algo %d: Find %.4f ms, timed %.4f ms, ws %zu B\n", L.algo, L.find_ms, L.ms, L.ws);
        Best B = engines(h, g, dir, b, reps, do_scan, deadline, t0, L.ms);
        const float mn = std::min(L.ms, B.ms);
        printf("  SUMMARY %-20s %-5s legacy %.4f ms | best engine %.4f ms (%.3fx) %s\n", g.name, dir_name(dir), L.ms,
               B.ms, L.ms / B.ms, B.what.c_str());
        sum_legacy += L.ms;
        sum_engine += std::isfinite(B.ms) ? B.ms : L.ms;
        sum_min += mn;
        fflush(stdout);
      }
      cudaFree(b.x);
      cudaFree(b.w);
      cudaFree(b.y);
      cudaFree(b.ref);
      cudaFree(b.ws);
    }
    printf("TOTAL legacy %.3f ms, best engines %.3f ms, per-direction min %.3f ms (%.1f%% less than legacy)\n",
           sum_legacy, sum_engine, sum_min, 100.0 * (sum_legacy - sum_min) / sum_legacy);
    cudnnDestroy(h);
  } catch (const std::exception& e) {
    printf("FAILED: %s\n", e.what());
    return 1;
  }
  printf("done in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
