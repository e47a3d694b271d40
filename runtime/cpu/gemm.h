// gemm: the CPU backend's dense matrix multiply (float and double), C = alpha * op(A) * op(B) + beta * C.
// Cache-blocked (packed A and B panels, register micro-kernel), multi-threaded over blocks of C only, so the
// result is bitwise identical for every thread count on one machine.
#pragma once
#include <cstdint>

#include "core/util/thread_pool.h"

namespace trctl {

enum class Trans { N, T };

// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, all row-major with leading dimensions lda/ldb/ldc.
// op(X) = X for Trans::N and X^T for Trans::T, so A is stored (M,K) for N and (K,M) for T (likewise B: (K,N) or
// (N,K)). beta == 0 means C is overwritten and never read (NaNs in C do not propagate); alpha == 0 or K == 0
// gives C = beta * C without reading A or B. pool may be nullptr (runs on the caller only).
// Every element of C is summed over K in one fixed order by exactly one thread: results do not depend on the
// pool size. They may differ between machines (the float kernel is picked by CPU features, e.g. FMA or not).
// Must not be called from inside pool->parallel_for (the pool is not re-entrant).
// Preconditions (checked, abort on violation): sizes >= 0, lda >= cols of stored A, likewise ldb and ldc >= N.
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, ThreadPool* pool);
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc, ThreadPool* pool);

}  // namespace trctl
