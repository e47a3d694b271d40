// cuBLASLt wrapper vs a double host reference for the MLP's GEMMs (N = 200; 784 -> 1024 -> 512 -> 256 -> 10): the
// forward (A:N B:T), dX (N N) and dW (T N) products with every epilogue, all input/output precisions, alpha/beta,
// all four transpose modes on odd shapes, and bitwise reruns. Every check prints one line with its worst error
// relative to the bound and the chosen cuBLASLt algorithm; unsupported optional epilogues print a WARN.
//
// Tolerances (bound on |got - ref| per element, mag = sum_k |op(A)[i][k] op(B)[k][j]| + |bias| + |beta C|):
//   f32 (CUBLAS_COMPUTE_32F):   1e-5 * mag. The f32 accumulation error is <= k * 2^-24 * mag in the worst case and
//                               ~sqrt(k) * 2^-24 * mag typically (< 2e-6 * mag at k = 1024).
//   tf32 (FAST_TF32):           2.5e-3 * mag: each input is cut to a 10-bit mantissa, a product is off by up to
//                               2 * 2^-10 relative if the conversion truncates (2^-10 if it rounds), plus f32 sums.
//   f16/bf16 inputs, f32 acc:   1e-4 * mag for the accumulation (products of 11/8-bit mantissas are exact in f32;
//                               the tensor-core adder may truncate), plus, for an f16/bf16 OUTPUT, its rounding:
//                               u * (|ref| + 1e-4 * mag), u = 2^-11 (f16) or 2^-8 (bf16), and 2^-25 for f16
//                               subnormals. The reference uses the f16/bf16-rounded inputs, so input rounding is not
//                               part of the error (C and the bias are also generated as f16/bf16 values: reading
//                               them is exact).
//   f16/bf16 output plus a second term (bias, or beta C): one more rounding, u * (|alpha AB| + 1e-4 * mag), because
//                               some cuBLASLt kernels round alpha * AB to the output type BEFORE adding the bias or
//                               beta * C: D = rnd(rnd(alpha AB) + term). This error is relative to |alpha AB|, not to
//                               |D|: where the term cancels AB it is many ulp of D. Seen on the H200 (cuBLASLt 13.1)
//                               with algo 66 and beta = 1 (dW accumulation, f16 and bf16) and algo 23 with
//                               RELU_AUX_BIAS (bf16; f16 consistent): the printed bad elements equal rnd(rnd(AB) + C)
//                               bit for bit, and a host emulation of that double rounding gives the device's counts
//                               outside the single-rounding bound (bf16 dW L0/L1/L2 42833/27997/6911 vs the device's
//                               42833/27998/6911, f16 L0 1 vs 1; bf16 L3 RELU_AUX_BIAS 29 vs 29) and its worst ratios
//                               (5.74, 4.87, 5.56, 1.04). Each check prints how many elements needed this allowance,
//                               so the log shows which kernels round twice.
//   Split-K: lt_gemm keeps f16/bf16 outputs off the INPLACE and OUTPUT_TYPE reduction schemes (partials summed in
//                               the output type); each 16-bit check asserts the chosen scheme is NONE or COMPUTE_TYPE.
//
// ReLU mask (RELU_AUX_BIAS): bit (i * aux_ld + j), LSB first, set iff the kernel's pre-activation x >= 0. cuBLASLt
// sets the bit where x is exactly 0 (D = 0): the H200 mask/D disagreements (f32 L0 1 of 204800, f16 L3 1 of 2000,
// bf16 L3 3 of 2000) match elements whose x is exactly 0 (f16/bf16 L3: the host emulation rnd(rnd(AB) + bias) is 0
// at exactly 1 and 3 elements, the first being the first mismatch the device reported; f32 L0: the mismatch is the
// element with the smallest |x| of all, 3e-8, i.e. within one f32 ulp of the bias). So the check is: D > 0 => bit
// set, bit clear => D == 0 (exact, both follow from x), and against the reference pre-activation v with its bound b:
// v > b => bit set, v < -b => bit clear; only |v| <= b may go either way (counted; the odd ones are printed).
#include <cmath>
#include <map>

#include "runtime/cuda/lt_gemm.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Precision {
  const char* name;
  GpuDType ab, d;
  GemmMath math;
  double acc_tol;
};

const Precision kPrecisions[] = {
    {"f32", GpuDType::F32, GpuDType::F32, GemmMath::Default, 1e-5},
    {"tf32", GpuDType::F32, GpuDType::F32, GemmMath::FastTf32, 2.5e-3},
    {"f16->f16", GpuDType::F16, GpuDType::F16, GemmMath::Default, 1e-4},
    {"f16->f32", GpuDType::F16, GpuDType::F32, GemmMath::Default, 1e-4},
    {"bf16->bf16", GpuDType::BF16, GpuDType::BF16, GemmMath::Default, 1e-4},
    {"bf16->f32", GpuDType::BF16, GpuDType::F32, GemmMath::Default, 1e-4},
};

struct Problem {
  std::string name;
  int64_t m, n, k;
  bool ta, tb;
};

// A stored (m, k) or (k, m); B stored (k, n) or (n, k): float values, rounded per input precision later.
struct Inputs {
  std::vector<float> a, b;
};

// Double reference of op(A) op(B) for one input rounding, with magnitudes and the row sums of op(A) (BiasGradA).
struct Reference {
  std::vector<double> p, mag, rowsum_a, rowsum_a_mag;
};

Inputs make_inputs(const Problem& pr, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.a = rng.uniform_vec(pr.m * pr.k, -1.0f, 1.0f);
  const float bs = 1.5f / std::sqrt(static_cast<float>(pr.k));  // keeps outputs O(1) (f16 range, ReLU both sides)
  in.b = rng.uniform_vec(pr.k * pr.n, -bs, bs);
  return in;
}

std::vector<float> rounded(const std::vector<float>& v, GpuDType t) {
  std::vector<float> r(v);
  for (auto& x : r) x = round_to(t, x);
  return r;
}

Reference make_reference(const Problem& pr, const Inputs& in) {
  const int64_t m = pr.m, n = pr.n, k = pr.k;
  std::vector<double> oa(m * k), ob(k * n);  // op(A) (m, k) and op(B) (k, n), row-major
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < k; ++q) oa[i * k + q] = pr.ta ? in.a[q * m + i] : in.a[i * k + q];
  }
  for (int64_t q = 0; q < k; ++q) {
    for (int64_t j = 0; j < n; ++j) ob[q * n + j] = pr.tb ? in.b[j * k + q] : in.b[q * n + j];
  }
  Reference r;
  r.p.assign(m * n, 0.0);
  r.mag.assign(m * n, 0.0);
  r.rowsum_a.assign(m, 0.0);
  r.rowsum_a_mag.assign(m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double* pi = &r.p[i * n];
    double* mi = &r.mag[i * n];
    for (int64_t q = 0; q < k; ++q) {
      const double a = oa[i * k + q], aa = std::fabs(a);
      r.rowsum_a[i] += a;
      r.rowsum_a_mag[i] += aa;
      const double* bq = &ob[q * n];
      for (int64_t j = 0; j < n; ++j) {
        pi[j] += a * bq[j];
        mi[j] += aa * std::fabs(bq[j]);
      }
    }
  }
  return r;
}

bool mask_bit(const std::vector<uint8_t>& mask, int64_t ld, int64_t i, int64_t j) {
  const int64_t bit = i * ld + j;
  return (mask[bit >> 3] >> (bit & 7)) & 1;
}

// Everything one GEMM check needs besides the plan description.
struct Job {
  const Problem* pr;
  const Precision* prec;
  GemmEpilogue epi;
  float alpha = 1.0f, beta = 0.0f;
  const Inputs* in;             // unrounded
  const Reference* ref;         // for prec->ab rounding
};

struct Outcome {
  enum Kind { Ok, Unsupported, Failed } kind = Ok;
  std::string text;
};

// second: |alpha op(A) op(B)| when the epilogue adds a bias or beta * C to it, else 0 (see the header: a 16-bit
// output may be rounded once more, before that addition).
double out_bound(const Precision& prec, double ref, double mag, double second = 0.0) {
  const double acc = prec.acc_tol * mag;
  if (prec.d == GpuDType::F32) return acc;
  const double u = unit_roundoff(prec.d);
  const double sub = prec.d == GpuDType::F16 ? std::ldexp(1.0, -25) : 0.0;
  const double first = acc + u * (std::fabs(ref) + acc) + sub;
  return second > 0.0 ? first + u * (second + acc) + sub : first;
}

bool epi_optional(GemmEpilogue e) {
  return e == GemmEpilogue::ReluAuxBias || e == GemmEpilogue::DRelu || e == GemmEpilogue::DReluBiasGrad ||
         e == GemmEpilogue::BiasGradA;
}

bool epi_bias_in(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::ReluBias || e == GemmEpilogue::ReluAuxBias;
}

// A ReLU mask (m, n) for DRelu inputs: made by the device (ReluAuxBias forward of the same precision) or, when that
// epilogue is unsupported, on the host with the documented layout (bit i * ld + j, LSB first). The reference keep
// flags are the bits the DRelu GEMM will read, under that layout (which the ReluAuxBias checks verify); they are
// checked against the forward output here too: y > 0 => bit set, bit clear => y == 0 (a bit may be set where y == 0:
// pre-activation exactly 0, see the header).
struct MaskInput {
  DevBuf dev;
  std::vector<uint8_t> keep;  // (m, n) 0/1
  std::string origin;
};

MaskInput make_mask(CudaContext& ctx, const Precision& prec, int64_t m, int64_t n) {
  MaskInput mi;
  mi.dev = DevBuf(lt_gemm_relu_mask_bytes(m, n));
  mi.keep.assign(m * n, 0);
  const int64_t k = 64;
  GemmDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_b = true;
  d.ab_type = prec.ab;
  d.d_type = prec.d;
  d.math = prec.math;
  d.epilogue = GemmEpilogue::ReluAuxBias;
  auto plan = lt_gemm_plan(ctx, d);
  if (plan.ok()) {
    Rng rng(71 + m + n);
    DevBuf a = to_device_as(prec.ab, rng.uniform_vec(m * k, -1.0f, 1.0f));
    DevBuf b = to_device_as(prec.ab, rng.uniform_vec(n * k, -0.2f, 0.2f));
    DevBuf bias = to_device_as(prec.d, rng.uniform_vec(n, -0.1f, 0.1f));
    DevBuf y(m * n * gpu_dtype_size(prec.d));
    GemmArgs args;
    args.a = a.get();
    args.b = b.get();
    args.d = y.get();
    args.bias = bias.get();
    args.aux = mi.dev.get();
    REQUIRE_OK(lt_gemm_run(ctx, plan.value(), args));
    sync_ok(ctx);
    const auto yh = from_device_as(prec.d, y.get(), m * n);
    const auto bits = from_device<uint8_t>(mi.dev.get(), mi.dev.bytes());
    const int64_t ld = lt_gemm_relu_mask_ld(n);
    int64_t inconsistent = 0, set_at_zero = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const bool bit = mask_bit(bits, ld, i, j), pos = yh[i * n + j] > 0.0f;
        mi.keep[i * n + j] = bit;
        if (pos != bit && !(bit && yh[i * n + j] == 0.0f)) ++inconsistent;
        if (bit && !pos) ++set_at_zero;
      }
    }
    INFO("DRelu input mask: " << inconsistent << " bits inconsistent with the forward output, " << set_at_zero
                              << " set where it is 0");
    CHECK(inconsistent == 0);
    mi.origin = "mask from a device ReluAuxBias forward (" + std::to_string(set_at_zero) + " bits set where y == 0)";
    return mi;
  }
  Rng rng(72 + m + n);
  std::vector<uint8_t> bytes(mi.dev.bytes());
  for (auto& x : bytes) x = static_cast<uint8_t>(rng.below(256));
  upload(mi.dev.get(), bytes);
  const int64_t ld = lt_gemm_relu_mask_ld(n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) mi.keep[i * n + j] = mask_bit(bytes, ld, i, j);
  }
  mi.origin = "host mask with the assumed layout (ReluAuxBias unsupported here)";
  return mi;
}

struct DeviceRun {
  std::vector<float> d, bias;
  std::vector<uint8_t> aux;
};

std::string job_name(const Job& job) {
  std::string s = std::string("gemm ") + job.prec->name + " " + job.pr->name + " " + gemm_epilogue_name(job.epi);
  if (job.beta != 0.0f) s += " alpha=" + std::to_string(job.alpha) + " beta=" + std::to_string(job.beta);
  return s;
}

bool bias_is_output(GemmEpilogue e) { return e == GemmEpilogue::DReluBiasGrad || e == GemmEpilogue::BiasGradA; }
bool aux_is_input(GemmEpilogue e) { return e == GemmEpilogue::DRelu || e == GemmEpilogue::DReluBiasGrad; }

// Plans the job; an unsupported optional epilogue is reported (WARN) rather than failed.
Outcome::Kind plan_job(CudaContext& ctx, const Job& job, const std::string& name, LtGemmPlan* out) {
  GemmDesc desc;
  desc.m = job.pr->m;
  desc.n = job.pr->n;
  desc.k = job.pr->k;
  desc.trans_a = job.pr->ta;
  desc.trans_b = job.pr->tb;
  desc.ab_type = job.prec->ab;
  desc.d_type = job.prec->d;
  desc.math = job.prec->math;
  desc.epilogue = job.epi;
  desc.alpha = job.alpha;
  desc.beta = job.beta;
  auto plan = lt_gemm_plan(ctx, desc);
  if (plan.ok()) {
    *out = std::move(plan.value());
    return Outcome::Ok;
  }
  if (plan.errors()[0].code == ErrCode::NotSupported && epi_optional(job.epi)) {
    WARN(name << ": not supported by this cuBLASLt (optional epilogue; the caller falls back to separate "
                 "kernels)\n"
              << plan.error_text());
    std::printf("  [unsupported] %s\n", name.c_str());
    return Outcome::Unsupported;
  }
  FAIL_CHECK(name << ": plan failed:\n" << plan.error_text());
  return Outcome::Failed;
}

// Device buffers and host-side values of one job.
struct JobData {
  std::vector<float> bias_h, c_h;  // bias (n) and C (m, n), rounded to the output type
  int64_t bias_len = 0;
  DevBuf a, b, d, bias, aux_out;
  MaskInput mask;
  GemmArgs args;
};

JobData job_data(CudaContext& ctx, const Job& job) {
  const Problem& pr = *job.pr;
  const Precision& prec = *job.prec;
  JobData jd;
  Rng rng(81 + pr.m * 3 + pr.n * 5 + pr.k * 7 + static_cast<int>(job.epi));
  jd.bias_h = rounded(rng.uniform_vec(pr.n, -0.5f, 0.5f), prec.d);
  jd.c_h = rounded(rng.uniform_vec(pr.m * pr.n, -1.0f, 1.0f), prec.d);
  jd.bias_len = job.epi == GemmEpilogue::BiasGradA ? pr.m : pr.n;
  jd.a = to_device_as(prec.ab, job.in->a);
  jd.b = to_device_as(prec.ab, job.in->b);
  jd.d = DevBuf(pr.m * pr.n * gpu_dtype_size(prec.d));
  jd.bias = epi_bias_in(job.epi) ? to_device_as(prec.d, jd.bias_h) : DevBuf(jd.bias_len * gpu_dtype_size(prec.d));
  jd.aux_out = DevBuf(lt_gemm_relu_mask_bytes(pr.m, pr.n));
  if (aux_is_input(job.epi)) jd.mask = make_mask(ctx, prec, pr.m, pr.n);
  jd.args.a = jd.a.get();
  jd.args.b = jd.b.get();
  jd.args.d = jd.d.get();
  if (epi_bias_in(job.epi) || bias_is_output(job.epi)) jd.args.bias = jd.bias.get();
  if (aux_is_input(job.epi)) jd.args.aux = jd.mask.dev.get();
  if (job.epi == GemmEpilogue::ReluAuxBias) jd.args.aux = jd.aux_out.get();
  return jd;
}

// One execution with freshly poisoned outputs (or D preloaded with C when beta != 0: C aliases D).
DeviceRun execute(CudaContext& ctx, const Job& job, LtGemmPlan& pl, JobData& jd) {
  const Precision& prec = *job.prec;
  const int64_t mn = job.pr->m * job.pr->n;
  if (job.beta != 0.0f) {
    DevBuf tmp = to_device_as(prec.d, jd.c_h);
    copy_sync(jd.d.get(), tmp.get(), mn * gpu_dtype_size(prec.d), cudaMemcpyDeviceToDevice);
  } else {
    poison(jd.d);
  }
  if (bias_is_output(job.epi)) poison(jd.bias);
  if (job.epi == GemmEpilogue::ReluAuxBias) memset_sync(jd.aux_out.get(), 0xA5, jd.aux_out.bytes());
  REQUIRE_OK(lt_gemm_run(ctx, pl, jd.args));
  sync_ok(ctx);
  DeviceRun r;
  r.d = from_device_as(prec.d, jd.d.get(), mn);
  if (bias_is_output(job.epi)) r.bias = from_device_as(prec.d, jd.bias.get(), jd.bias_len);
  if (job.epi == GemmEpilogue::ReluAuxBias) r.aux = from_device<uint8_t>(jd.aux_out.get(), jd.aux_out.bytes());
  return r;
}

// Reference D with its per-element bound; the same bound without the double-rounding allowance (to count the
// elements that need it); the pre-activation (before ReLU / mask) with its bound, for the ReLU mask check.
struct Expected {
  std::vector<double> d, bound, bound_single, pre, pre_bound;
};

Expected expected_d(const Job& job, const JobData& jd) {
  const int64_t m = job.pr->m, n = job.pr->n;
  const Reference& ref = *job.ref;
  const bool relu = job.epi == GemmEpilogue::ReluBias || job.epi == GemmEpilogue::ReluAuxBias;
  const bool second_term = job.beta != 0.0f || epi_bias_in(job.epi);
  Expected x;
  for (auto* v : {&x.d, &x.bound, &x.bound_single, &x.pre, &x.pre_bound}) v->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t e = i * n + j;
      double v = job.alpha * ref.p[e], mag = std::fabs(job.alpha) * ref.mag[e];
      const double second = second_term ? std::fabs(v) : 0.0;
      if (job.beta != 0.0f) {
        v += job.beta * jd.c_h[e];
        mag += std::fabs(job.beta * jd.c_h[e]);
      }
      if (epi_bias_in(job.epi)) {
        v += jd.bias_h[j];
        mag += std::fabs(jd.bias_h[j]);
      }
      x.pre[e] = v;
      x.pre_bound[e] = out_bound(*job.prec, v, mag, second);
      if (relu) v = std::max(v, 0.0);  // |relu(a) - relu(b)| <= |a - b|: the bound of v carries over
      if (aux_is_input(job.epi) && !jd.mask.keep[e]) v = 0.0;
      x.d[e] = v;
      x.bound[e] = out_bound(*job.prec, v, mag, second);
      x.bound_single[e] = out_bound(*job.prec, v, mag);
    }
  }
  return x;
}

// How many elements are within the bound only thanks to the double-rounding allowance (informational).
int64_t count_double_rounded(const std::vector<double>& got, const Expected& x) {
  int64_t k = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double d = std::fabs(got[e] - x.d[e]);
    if (d > x.bound_single[e] && d <= x.bound[e]) ++k;
  }
  return k;
}

// The bias gradient of DReluBiasGrad (column sums of the masked D) or BiasGradA (row sums of op(A)).
bool check_bias_grad(const Job& job, const JobData& jd, const std::vector<double>& rd, const DeviceRun& r,
                     const std::string& name) {  // rd: the reference D (Expected::d)
  const Precision& prec = *job.prec;
  const Reference& ref = *job.ref;
  const int64_t m = job.pr->m, n = job.pr->n;
  // cuBLASLt may reduce the rounded f16/bf16 outputs rather than the f32 accumulators: for low-precision outputs
  // the bound also allows one output rounding per summed term (u * sum |terms|).
  const double u_terms = prec.d == GpuDType::F32 ? 0.0 : unit_roundoff(prec.d);
  std::vector<double> rb(jd.bias_len, 0.0), bb(jd.bias_len, 0.0);
  if (job.epi == GemmEpilogue::BiasGradA) {
    for (int64_t i = 0; i < m; ++i) {
      rb[i] = ref.rowsum_a[i];
      bb[i] = out_bound(prec, rb[i], ref.rowsum_a_mag[i]) + u_terms * ref.rowsum_a_mag[i];
    }
  } else {
    std::vector<double> mag(n, 0.0), terms(n, 0.0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        rb[j] += rd[i * n + j];
        mag[j] += jd.mask.keep[i * n + j] ? ref.mag[i * n + j] : 0.0;
        terms[j] += std::fabs(rd[i * n + j]);
      }
    }
    for (int64_t j = 0; j < n; ++j) bb[j] = out_bound(prec, rb[j], mag[j] + 1e-30) + u_terms * terms[j];
  }
  const CompareResult cb = compare_close(name + " bias_grad", to_double(r.bias), rb, bb);
  INFO(cb.text);
  CHECK(cb.ok);
  return cb.ok;
}

// The ReluAuxBias mask under the documented layout (bit i * ld + j, LSB first) with the semantics in the header:
// exact against the device D (D > 0 => set, clear => D == 0), and against the reference pre-activation wherever it
// is farther than its error bound from 0. Elements within the bound of 0 may go either way; the first few of them
// (and every violation) are printed with D, the reference and the bound.
bool check_relu_mask(const Job& job, const DeviceRun& r, const Expected& x, const std::string& name) {
  const int64_t m = job.pr->m, n = job.pr->n, ld = lt_gemm_relu_mask_ld(n);
  int64_t bad_vs_d = 0, bad_vs_ref = 0, near_zero = 0, set_at_zero = 0, shown = 0;
  std::string detail;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t e = i * n + j;
      const bool bit = mask_bit(r.aux, ld, i, j);
      const double d = r.d[e], v = x.pre[e], b = x.pre_bound[e];
      const bool vs_d = bit ? d >= 0.0 : d == 0.0;  // set: D > 0, or D == 0 from x == 0; clear: D == 0
      const bool ambiguous = std::fabs(v) <= b;
      const bool vs_ref = ambiguous || bit == (v > 0.0);
      bad_vs_d += !vs_d;
      bad_vs_ref += !vs_ref;
      near_zero += ambiguous;
      set_at_zero += bit && d == 0.0;
      const bool odd = ambiguous && (bit != (d > 0.0) || bit != (v > 0.0));  // allowed, but worth showing
      if ((!vs_d || !vs_ref || odd) && shown++ < 8) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "\n    [%lld][%lld] bit %d D %.9g ref pre-activation %.9g bound %.3g%s",
                      static_cast<long long>(i), static_cast<long long>(j), bit ? 1 : 0, d, v, b,
                      !vs_d || !vs_ref ? " VIOLATION" : " (within the bound of 0)");
        detail += buf;
      }
    }
  }
  const bool ok = bad_vs_d == 0 && bad_vs_ref == 0;
  std::printf("  [%s] %s relu mask (bit i*%lld + j): %lld of %lld bits inconsistent with D, %lld with the reference "
              "beyond its bound; %lld set where D == 0; %lld elements within the bound of 0%s%s\n",
              ok ? "ok" : "FAIL", name.c_str(), static_cast<long long>(ld), static_cast<long long>(bad_vs_d),
              static_cast<long long>(m * n), static_cast<long long>(bad_vs_ref), static_cast<long long>(set_at_zero),
              static_cast<long long>(near_zero),
              ok ? "" : " -- layout or semantics in lt_gemm.h wrong", detail.c_str());
  INFO("relu mask: " << bad_vs_d << " inconsistent with D, " << bad_vs_ref << " with the reference" << detail);
  CHECK(ok);
  return ok;
}

// A 16-bit output must not use a split-K reduction that sums partial products in the output type (INPLACE,
// OUTPUT_TYPE): lt_gemm_plan masks them out (H200 run 2, before that: bf16 dX 200x256x10 DRelu, split-K 8 with
// OUTPUT_TYPE, errors up to 22x the fp32-accumulation bound).
bool check_reduction_scheme(const LtGemmPlan& pl, const std::string& name) {
  uint32_t scheme = 0;
  size_t written = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoConfigGetAttribute(&pl.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                                 &scheme, sizeof scheme, &written);
  const bool ok = st == CUBLAS_STATUS_SUCCESS &&
                  (scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  INFO(name << ": reduction scheme " << scheme << " (status " << static_cast<int>(st) << ")");
  CHECK(ok);
  return ok;
}

// A second execution of the same plan must be bitwise identical.
bool check_rerun(const Job& job, const DeviceRun& r1, const DeviceRun& r2, const std::string& name) {
  std::vector<CompareResult> rs;
  rs.push_back(compare_bitwise(name + " rerun D", r1.d.data(), r2.d.data(), r1.d.size() * 4, 4));
  if (bias_is_output(job.epi)) {
    rs.push_back(compare_bitwise(name + " rerun bias_grad", r1.bias.data(), r2.bias.data(), r1.bias.size() * 4, 4));
  }
  if (job.epi == GemmEpilogue::ReluAuxBias) {
    rs.push_back(compare_bitwise(name + " rerun aux", r1.aux.data(), r2.aux.data(), r1.aux.size(), 1));
  }
  bool ok = true;
  for (const CompareResult& r : rs) {
    INFO(r.text);
    CHECK(r.ok);
    ok = ok && r.ok;
  }
  return ok;
}

Outcome run_job(CudaContext& ctx, const Job& job, std::map<std::string, int>& tally) {
  const std::string name = job_name(job);
  INFO(name);
  LtGemmPlan pl;
  const Outcome::Kind planned = plan_job(ctx, job, name, &pl);
  if (planned != Outcome::Ok) {
    ++tally[planned == Outcome::Unsupported ? "unsupported" : "failed"];
    return {planned, name};
  }
  JobData jd = job_data(ctx, job);
  const DeviceRun r1 = execute(ctx, job, pl, jd);
  const Expected x = expected_d(job, jd);
  const std::vector<double> got = to_double(r1.d);
  const CompareResult cd = compare_close(name + " D", got, x.d, x.bound, job.pr->n);
  INFO(cd.text << "\nplan: " << lt_gemm_describe(pl)
               << (aux_is_input(job.epi) ? "\n" + jd.mask.origin : std::string()));
  CHECK(cd.ok);
  bool ok = cd.ok;
  if (const int64_t twice = count_double_rounded(got, x)) {
    std::printf("  [note] %s: %lld elements beyond the single-rounding bound, within the double-rounding allowance\n",
                name.c_str(), static_cast<long long>(twice));
  }
  if (job.prec->d != GpuDType::F32) ok = check_reduction_scheme(pl, name) && ok;
  if (bias_is_output(job.epi)) ok = check_bias_grad(job, jd, x.d, r1, name) && ok;
  if (job.epi == GemmEpilogue::ReluAuxBias) ok = check_relu_mask(job, r1, x, name) && ok;
  const DeviceRun r2 = execute(ctx, job, pl, jd);
  ok = check_rerun(job, r1, r2, name) && ok;
  std::printf("  [%s] %s | %s\n", ok ? "ok" : "FAIL", name.c_str(), lt_gemm_describe(pl).c_str());
  ++tally[ok ? "ok" : "failed"];
  return {ok ? Outcome::Ok : Outcome::Failed, name};
}

// References for each input rounding of one problem (f32 and tf32 share the unrounded inputs).
struct ProblemData {
  Problem pr;
  std::map<GpuDType, Inputs> in;
  std::map<GpuDType, Reference> ref;
};

ProblemData problem_data(const Problem& pr, uint64_t seed) {
  ProblemData pd;
  pd.pr = pr;
  const Inputs base = make_inputs(pr, seed);
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    Inputs r{rounded(base.a, t), rounded(base.b, t)};
    pd.ref[t] = make_reference(pr, r);
    pd.in[t] = std::move(r);
  }
  return pd;
}

void print_tally(const char* what, const std::map<std::string, int>& tally) {
  auto get = [&](const char* k) {
    auto it = tally.find(k);
    return it == tally.end() ? 0 : it->second;
  };
  std::printf("%s: %d ok, %d unsupported (optional epilogues), %d failed\n", what, get("ok"), get("unsupported"),
              get("failed"));
}

}  // namespace

TEST_CASE("cuBLASLt GEMMs of the MLP training step match the double reference in every precision and epilogue",
          "[gemm]") {
  CudaContext ctx = make_context();
  std::printf("context: %s\n", cuda_context_describe(ctx).c_str());
  const int64_t N = 200;
  const int64_t widths[] = {784, 1024, 512, 256, 10};
  std::map<std::string, int> tally;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t in = widths[layer], out = widths[layer + 1];
    const std::string L = "L" + std::to_string(layer) + "(" + std::to_string(in) + "->" + std::to_string(out) + ")";
    const ProblemData fwd = problem_data({L + " fwd Y=XW^T", N, out, in, false, true}, 100 + layer);
    const ProblemData dx = problem_data({L + " dX=dY W", N, in, out, false, false}, 200 + layer);
    const ProblemData dw = problem_data({L + " dW=dY^T X", out, in, N, true, false}, 300 + layer);
    for (const Precision& prec : kPrecisions) {
      for (GemmEpilogue e : {GemmEpilogue::None, GemmEpilogue::Bias, GemmEpilogue::ReluBias,
                             GemmEpilogue::ReluAuxBias}) {
        run_job(ctx, {&fwd.pr, &prec, e, 1.0f, 0.0f, &fwd.in.at(prec.ab), &fwd.ref.at(prec.ab)}, tally);
      }
      for (GemmEpilogue e : {GemmEpilogue::None, GemmEpilogue::DRelu, GemmEpilogue::DReluBiasGrad}) {
        run_job(ctx, {&dx.pr, &prec, e, 1.0f, 0.0f, &dx.in.at(prec.ab), &dx.ref.at(prec.ab)}, tally);
      }
      run_job(ctx, {&dw.pr, &prec, GemmEpilogue::None, 1.0f, 0.0f, &dw.in.at(prec.ab), &dw.ref.at(prec.ab)}, tally);
      run_job(ctx, {&dw.pr, &prec, GemmEpilogue::BiasGradA, 1.0f, 0.0f, &dw.in.at(prec.ab), &dw.ref.at(prec.ab)},
              tally);
      // Gradient accumulation into D (beta = 1, C aliases D).
      run_job(ctx, {&dw.pr, &prec, GemmEpilogue::None, 1.0f, 1.0f, &dw.in.at(prec.ab), &dw.ref.at(prec.ab)}, tally);
    }
  }
  print_tally("MLP GEMM checks", tally);
}

TEST_CASE("cuBLASLt GEMMs handle all four transpose modes, odd shapes and alpha/beta", "[gemm]") {
  CudaContext ctx = make_context();
  std::map<std::string, int> tally;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::string mode = std::string("A:") + (ta ? "T" : "N") + " B:" + (tb ? "T" : "N");
      const ProblemData aligned = problem_data({"64x96x40 " + mode, 64, 96, 40, ta, tb}, 400 + ta * 2 + tb);
      const ProblemData odd = problem_data({"37x53x29 " + mode, 37, 53, 29, ta, tb}, 500 + ta * 2 + tb);
      for (const Precision& prec : kPrecisions) {
        run_job(ctx, {&aligned.pr, &prec, GemmEpilogue::None, 1.0f, 0.0f, &aligned.in.at(prec.ab),
                      &aligned.ref.at(prec.ab)},
                tally);
        run_job(ctx, {&aligned.pr, &prec, GemmEpilogue::Bias, 1.0f, 0.0f, &aligned.in.at(prec.ab),
                      &aligned.ref.at(prec.ab)},
                tally);
        run_job(ctx, {&aligned.pr, &prec, GemmEpilogue::None, 0.5f, 0.25f, &aligned.in.at(prec.ab),
                      &aligned.ref.at(prec.ab)},
                tally);
      }
      // Odd leading dimensions: f32 only (f16/bf16 tensor-core kernels need 16-byte aligned rows).
      for (const Precision* prec : {&kPrecisions[0], &kPrecisions[1]}) {
        run_job(ctx, {&odd.pr, prec, GemmEpilogue::None, 1.0f, 0.0f, &odd.in.at(prec->ab), &odd.ref.at(prec->ab)},
                tally);
      }
    }
  }
  print_tally("transpose-mode GEMM checks", tally);
}

TEST_CASE("lt_gemm_plan rejects invalid descriptions and lt_gemm_run rejects bad pointers", "[gemm]") {
  CudaContext ctx = make_context();
  GemmDesc d;
  d.m = 8;
  d.n = 8;
  d.k = 8;
  GemmDesc bad = d;
  bad.k = 0;
  CHECK_FALSE(lt_gemm_plan(ctx, bad).ok());
  bad = d;
  bad.d_type = GpuDType::F16;  // f32 inputs with an f16 output
  CHECK_FALSE(lt_gemm_plan(ctx, bad).ok());
  bad = d;
  bad.ab_type = GpuDType::F16;
  bad.d_type = GpuDType::F16;
  bad.math = GemmMath::FastTf32;
  CHECK_FALSE(lt_gemm_plan(ctx, bad).ok());
  bad = d;
  bad.lda = 4;
  CHECK_FALSE(lt_gemm_plan(ctx, bad).ok());
  auto plan = lt_gemm_plan(ctx, d);
  REQUIRE_OK(plan);
  DevBuf a(8 * 8 * 4 + 256), b(8 * 8 * 4), out(8 * 8 * 4);
  GemmArgs args;
  args.a = a.get();
  args.b = b.get();
  CHECK_FALSE(lt_gemm_run(ctx, plan.value(), args).ok());  // D missing
  args.d = out.get();
  args.a = a.as<char>() + 4;                                 // misaligned for min_alignment 256
  CHECK_FALSE(lt_gemm_run(ctx, plan.value(), args).ok());
  args.a = a.get();
  memset_sync(a.get(), 0, a.bytes());
  memset_sync(b.get(), 0, b.bytes());
  CHECK(lt_gemm_run(ctx, plan.value(), args).ok());
  sync_ok(ctx);
}
