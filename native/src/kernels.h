// Declarations of the native kernels (gemm.cc, ops.cc, attention.cc). Shapes and semantics are those of
// src/kernels/kernels.ts; this header only lists the C++ entry points the addon bindings call.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gemm_args.h"

namespace sfx {

void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc);
// The same product on the calling thread only (for kernels that already run inside a parallel task).
void sgemmSerial(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc);
// bf16 products (gemm_bf16.cc). With the precision at Bf16, sgemm and sgemmSerial round op(A) and op(B) to
// bfloat16 and accumulate in fp32, on the CPU's AMX tile unit or with its AVX512-BF16 dot products (products
// of at most 4 rows, sgemv and the packed weights of decoding stay fp32). The precision starts as
// SINKFLEX_MATMUL says (bf16 or fp32, the default); asking for Bf16 where bf16Unit() is None leaves Fp32, and
// both setters return what is in effect.
enum class MatmulPrecision { Fp32 = 0, Bf16 = 1 };
enum class Bf16Unit { None = 0, Avx512Bf16 = 1, Amx = 2 };
Bf16Unit bf16Unit();
const char* bf16UnitName(Bf16Unit u);
MatmulPrecision matmulPrecision();
MatmulPrecision setMatmulPrecision(MatmulPrecision p);
// C = alpha op(A) op(B) + beta C for beta 0 or 1 (sgemm applies any other beta first); parallel: over the pool.
void sgemmBf16(const GemmArgs& g, bool parallel);
// Pre-packed weights for repeated products y = x W^T with W [N, K] (row stride ldw): packWeight writes W in
// the layout the micro-kernel reads (packedWeightSize(N, K) floats; fixed for the process, it depends on the
// SIMD level and the cache-block sizes), and sgemmPacked computes C = alpha * A W^T + beta * C from it,
// exactly as sgemm(false, true, ...) does from W.
size_t packedWeightSize(int N, int K);
void packWeight(int N, int K, const float* W, int ldw, float* dst);
void sgemmPacked(int M, int N, int K, float alpha, const float* A, int lda, const float* Wp, float beta, float* C,
                 int ldc);
void sgemv(bool trans, int M, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y);
// The depth of the blocks the fp32 micro-kernels sum over (each element of C: a chain of fused multiply-adds
// from zero over one block, then added to C): a kernel that must give the same values computes in these.
int gemmBlockDepth(int K);
// Products with a weight matrix held as bfloat16 (gemm_bf16.cc): C = alpha A op(W) + beta C, A [M, K] fp32,
// op(W) = W^T with W stored [N, K] (transW: y = x W^T) or W stored [K, N] (dX = dY W), accumulated in fp32.
// With a bf16 unit (and SIMD at AVX-512) A is rounded to bf16 and the unit's dot products compute, else
// blocks of W are widened to fp32 for the fp32 kernels. Parallel over the pool.
void gemmW16(bool transW, int M, int N, int K, float alpha, const float* A, int lda, const uint16_t* W, int ldw,
             float beta, float* C, int ldc);
// Products with weights quantized to int8 for sampling (gemm_q8.cc): W [N, K] held by rows in blocks of 32
// depth, int8 values q [N, Kp] (Kp = q8PaddedDepth(K), zero past K) and one fp32 scale per block
// (scales [N, Kp / 32]). quantizeQ8 writes them from fp32 values (wf) or bf16 bits (wb), row stride ldw;
// gemmQ8 computes C = alpha A W^T + beta C (A [M, K] fp32), each element in an order that does not depend on M.
int q8PaddedDepth(int K);
void quantizeQ8(int N, int K, const float* wf, const uint16_t* wb, int ldw, int8_t* q, float* scales);
void gemmQ8(int M, int N, int K, float alpha, const float* A, int lda, const int8_t* q, const float* scales, float beta,
            float* C, int ldc);

void axpy(size_t n, float alpha, const float* x, float* y);
void scale(size_t n, float alpha, float* x);
void add(size_t n, const float* a, const float* b, float* out);
double sumSquares(size_t n, const float* x);
void addBias(int N, int C, float* x, const float* bias);
void biasBackward(int N, int C, const float* dY, float* dBias);
void embeddingForward(int N, int C, const int32_t* ids, const float* table, float* out);
void embeddingBackward(int N, int C, const int32_t* ids, const float* dOut, float* dTable);
void rmsnormForward(int N, int C, float eps, const float* x, const float* w, float* out, float* rstd);
void rmsnormBackward(int N, int C, const float* dOut, const float* x, const float* w, const float* rstd, float* dX,
                     float* dW);
void rope(int N, int H, int D, const int32_t* pos, const float* cosT, const float* sinT, float* x, bool backward);
void swigluForward(size_t n, const float* gate, const float* up, float* out);
void swigluBackward(size_t n, const float* dOut, const float* gate, const float* up, float* dGate, float* dUp);
void softmaxRows(int N, int V, float temperature, const float* x, float* out, bool log);
void logprobsForward(int N, int V, const float* logits, const int32_t* targets, float* logprob, float* lse);
void logprobsBackward(int N, int V, const float* logits, const int32_t* targets, const float* lse,
                      const float* dLogprob, float* dLogits);
void adamwUpdate(size_t n, float* p, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float wd, int step, float gradScale);

struct AttnShape {
  int B, T, H, KVH, D;
  float scale;
};
struct AttnMask {
  int window;  // 0 = none
  int sinks;
  const int32_t* docIds;  // [B, T] or null
  const uint8_t* pinned;  // [B, T] or null
};
void attentionForward(const AttnShape& s, const AttnMask& m, const float* q, const float* k, const float* v,
                      const float* sinkLogit, float* out, float* lse);
void attentionBackward(const AttnShape& s, const AttnMask& m, const float* q, const float* k, const float* v,
                       const float* sinkLogit, const float* out, const float* lse, const float* dOut, float* dQ,
                       float* dK, float* dV, float* dSinkLogit);
struct CachedShape {
  int B, Tq, H, KVH, D;
  float scale;
  int blockSize, maxBlocks;
};
// Pinned cache entries (kept by every later query, like sink slots): sequence b's are the entries
// positions[start[b] .. start[b] + count[b]), ascending.
struct CachedPinned {
  const int32_t* start;
  const int32_t* count;
  const int32_t* positions;
};
void attentionCached(const CachedShape& s, int window, int sinks, const float* q, const float* kCache,
                     const float* vCache, const int32_t* blockTable, const int32_t* seqLens, const float* sinkLogit,
                     float* out, const CachedPinned* pinned = nullptr);

// GFLOP/s of a tight FMA loop on `threads` pool threads (0 = all), best of rounds over `seconds`.
double peakGflops(double seconds, int threads);

}  // namespace sfx
