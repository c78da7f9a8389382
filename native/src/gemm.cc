// Packed single-precision GEMM and GEMV.
//
// Goto/BLIS structure: C is split into one rectangle per task. When the tasks split the rows of C, op(B) is
// packed once per call by all threads together (KC-deep blocks of NR-column strips) and every task reads
// it, packing each MC x KC block of its rows of A once; when they split only the columns, each task packs
// its own NC x KC blocks of B. MR-row slivers of A stay in L1, the B block they pass over in L2, and a
// register-blocked micro-kernel computes MR x NR tiles of C. Weights used again and again (decoding) can be
// packed once in the same layout (packWeight) and multiplied without any packing of B (sgemmPacked). alpha is folded into packed A;
// beta is applied by the micro-kernel on the first depth block only. Three micro-kernels: AVX-512
// (MR=8, NR=32), AVX2+FMA (MR=6, NR=16) and portable C++ (MR=4, NR=16), chosen once from cpuid; with few
// rows of A (decoding) the SIMD ones also prefetch the next strip of B. The SIMD kernels pack A with
// SIMD transposes, and the width of the B block (NC) follows the core's L2 size.
// This file is not the elementwise ops or attention (ops.cc, attention.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu.h"
#include "gemm_args.h"
#include "gemm_neon.h"
#include "kernels.h"
#include "threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SFX_X86 1
// Plain loops compiled once per instruction set and picked at load time (on other CPUs, once).
#define SFX_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define SFX_CLONES
#endif

namespace sfx {

// ------------------------------------------------------------------------------------------- cpu

static Simd detectSimd() {
#if defined(__aarch64__)
  const char* level = std::getenv("SINKFLEX_SIMD");  // NEON is part of AArch64: no check needed
  return level && !std::strcmp(level, "portable") ? Simd::Portable : Simd::Neon;
#endif
  Simd best = Simd::Portable;
#ifdef SFX_X86
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12);
    if (osxsave && avx) {
      unsigned xlo, xhi;
      __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
      bool ymmOs = (xlo & 0x6) == 0x6;
      bool zmmOs = (xlo & 0xe6) == 0xe6;
      if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        bool avx2 = b & (1u << 5), avx512f = b & (1u << 16);
        if (ymmOs && avx2 && fma) best = Simd::Avx2;
        if (zmmOs && avx512f && best == Simd::Avx2) best = Simd::Avx512;
      }
    }
  }
#endif
  const char* env = std::getenv("SINKFLEX_SIMD");
  if (env) {
    Simd want = best;
    if (!std::strcmp(env, "portable")) want = Simd::Portable;
    if (!std::strcmp(env, "avx2")) want = Simd::Avx2;
    if (!std::strcmp(env, "avx512")) want = Simd::Avx512;
    if (static_cast<int>(want) < static_cast<int>(best)) best = want;
  }
  return best;
}

Simd simdLevel() {
  static Simd s = detectSimd();
  return s;
}

const char* simdName(Simd s) {
  switch (s) {
    case Simd::Avx512: return "avx512";
    case Simd::Avx2: return "avx2";
    case Simd::Neon: return "neon";
    default: return "portable";
  }
}

// ------------------------------------------------------------------------------- micro-kernels

// Every micro-kernel computes C[0:mr, 0:nr] = beta * C + Ap^T Bp over kc, where Ap is an MR x kc sliver
// stored k-major (Ap[k * MR + i]) and Bp a kc x NR sliver (Bp[k * NR + j]). mr < MR or nr < NR marks an edge
// tile: the full tile is computed into a scratch buffer and only the valid part is written.
using MicroKernel = void (*)(int kc, const float* Ap, const float* Bp, float* C, int ldc, float beta, int mr, int nr);

template <int MR, int NR>
static inline void storeTile(const float* tile, float* C, int ldc, float beta, int mr, int nr) {
  for (int i = 0; i < mr; i++) {
    float* c = C + static_cast<size_t>(i) * ldc;
    const float* t = tile + i * NR;
    if (beta == 0.f) {
      for (int j = 0; j < nr; j++) c[j] = t[j];
    } else if (beta == 1.f) {
      for (int j = 0; j < nr; j++) c[j] += t[j];
    } else {
      for (int j = 0; j < nr; j++) c[j] = beta * c[j] + t[j];
    }
  }
}

constexpr int kPortMR = 4, kPortNR = 16;
static void microPortable(int kc, const float* Ap, const float* Bp, float* C, int ldc, float beta, int mr, int nr) {
  float acc[kPortMR][kPortNR] = {};
  for (int k = 0; k < kc; k++) {
    const float* b = Bp + k * kPortNR;
    for (int i = 0; i < kPortMR; i++) {
      float a = Ap[k * kPortMR + i];
#pragma omp simd
      for (int j = 0; j < kPortNR; j++) acc[i][j] += a * b[j];
    }
  }
  storeTile<kPortMR, kPortNR>(&acc[0][0], C, ldc, beta, mr, nr);
}

#ifdef SFX_X86
constexpr int kAvx2MR = 6, kAvx2NR = 16;
// The AVX2 micro-kernel: 12 accumulators, the two vectors of a B row and one broadcast of A fill 15 of the
// 16 ymm registers. The accumulators are named variables, not an array: with an array GCC kept a copy in
// memory and stored all twelve on every step of depth (twelve stores per twelve FMAs halved the kernel's
// speed), and beta is read only after the loop so that it holds no register during it.
// With kPrefetch it also fetches the strip of B at pf into L2, one line per step of depth, as the AVX-512
// kernel does for few rows (decoding). kRows < 6 computes only the sliver's first kRows rows (a last sliver
// of few rows: decoding 1 or 32 sequences); each row's values are the same as in a full sliver (the same
// FMAs in the same order), so a row of C never depends on how many rows the product has.
#define SFX_AVX2_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
template <bool kPrefetch, int kRows = 6>
__attribute__((target("avx2,fma"), always_inline)) static inline void microAvx2Body(int kc, const float* Ap, const float* Bp,
                                                                                  float* C, int ldc, float beta, int mr,
                                                                                  int nr, const float* pf) {
#define SFX_ZERO(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
  SFX_AVX2_ROWS(SFX_ZERO)
#undef SFX_ZERO
  // the tile of C is written after the loop: start fetching its rows now
  for (int i = 0; i < mr; i++) _mm_prefetch(reinterpret_cast<const char*>(C + static_cast<size_t>(i) * ldc), _MM_HINT_T0);
#define SFX_FMA(i)                                          \
  if constexpr (i < kRows) {                                \
    const __m256 a = _mm256_broadcast_ss(A + i);            \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);              \
    c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);              \
  }
#pragma GCC unroll 4
  for (int k = 0; k < kc; k++) {
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(pf + k * 16), _MM_HINT_T1);
    const float* A = Ap + k * kAvx2MR;
    const __m256 b0 = _mm256_loadu_ps(Bp + k * kAvx2NR);
    const __m256 b1 = _mm256_loadu_ps(Bp + k * kAvx2NR + 8);
    SFX_AVX2_ROWS(SFX_FMA)
  }
#undef SFX_FMA
  if (kRows == kAvx2MR && mr == kAvx2MR && nr == kAvx2NR) {
    if (beta == 0.f) {
#define SFX_STORE(i)                                                          \
  _mm256_storeu_ps(C + static_cast<size_t>(i) * ldc, c##i##0);                \
  _mm256_storeu_ps(C + static_cast<size_t>(i) * ldc + 8, c##i##1);
      SFX_AVX2_ROWS(SFX_STORE)
#undef SFX_STORE
    } else {
      const __m256 vb = _mm256_set1_ps(beta);
#define SFX_UPDATE(i)                                                                                 \
  {                                                                                                   \
    float* ci = C + static_cast<size_t>(i) * ldc;                                                     \
    _mm256_storeu_ps(ci, beta == 1.f ? _mm256_add_ps(_mm256_loadu_ps(ci), c##i##0)                    \
                                     : _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), c##i##0));            \
    _mm256_storeu_ps(ci + 8, beta == 1.f ? _mm256_add_ps(_mm256_loadu_ps(ci + 8), c##i##1)            \
                                         : _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), c##i##1));    \
  }
      SFX_AVX2_ROWS(SFX_UPDATE)
#undef SFX_UPDATE
    }
    return;
  }
  alignas(32) float tile[kAvx2MR * kAvx2NR];
#define SFX_TILE(i)                                  \
  _mm256_store_ps(tile + i * kAvx2NR, c##i##0);      \
  _mm256_store_ps(tile + i * kAvx2NR + 8, c##i##1);
  SFX_AVX2_ROWS(SFX_TILE)
#undef SFX_TILE
  storeTile<kAvx2MR, kAvx2NR>(tile, C, ldc, beta, mr, nr);
}
#undef SFX_AVX2_ROWS

// A sliver of fewer than 6 rows computes only those (1, 2, 3 or 4 of them; 5 as a full sliver).
template <bool kPrefetch>
__attribute__((target("avx2,fma"), always_inline)) static inline void microAvx2Rows(int kc, const float* Ap, const float* Bp,
                                                                                  float* C, int ldc, float beta, int mr,
                                                                                  int nr, const float* pf) {
  switch (mr) {
    case 1: return microAvx2Body<kPrefetch, 1>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
    case 2: return microAvx2Body<kPrefetch, 2>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
    case 3: return microAvx2Body<kPrefetch, 3>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
    case 4: return microAvx2Body<kPrefetch, 4>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
    default: return microAvx2Body<kPrefetch>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
  }
}

__attribute__((target("avx2,fma"))) static void microAvx2(int kc, const float* Ap, const float* Bp, float* C, int ldc,
                                                         float beta, int mr, int nr) {
  microAvx2Rows<false>(kc, Ap, Bp, C, ldc, beta, mr, nr, nullptr);
}

__attribute__((target("avx2,fma"))) static void microAvx2Pf(int kc, const float* Ap, const float* Bp, float* C, int ldc,
                                                           float beta, int mr, int nr, const float* pf) {
  microAvx2Rows<true>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
}

constexpr int kAvx512MR = 8, kAvx512NR = 32;
// The AVX-512 micro-kernel. With kPrefetch it also prefetches kc * 64 bytes from pf into L2 (one line per
// step of depth) for the strip of B a later call reads: with few rows (decoding) B comes from memory and
// each strip is used for a short while only, so fetching the next one ahead keeps the arithmetic from
// waiting on it. (Into L2, not L1: the strip in use and the slivers of A fill L1 already.)
template <bool kPrefetch>
__attribute__((target("avx512f"), always_inline)) static inline void microAvx512Body(int kc, const float* Ap, const float* Bp,
                                                                                 float* C, int ldc, float beta, int mr,
                                                                                 int nr, const float* pf) {
  __m512 c[kAvx512MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < kAvx512MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int k = 0; k < kc; k++) {
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(pf + k * 16), _MM_HINT_T1);
    __m512 b0 = _mm512_loadu_ps(Bp + k * kAvx512NR);
    __m512 b1 = _mm512_loadu_ps(Bp + k * kAvx512NR + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kAvx512MR; i++) {
      __m512 a = _mm512_set1_ps(Ap[k * kAvx512MR + i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  if (mr == kAvx512MR && nr == kAvx512NR) {
    __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < kAvx512MR; i++) {
      float* ci = C + static_cast<size_t>(i) * ldc;
      if (beta == 0.f) {
        _mm512_storeu_ps(ci, c[i][0]);
        _mm512_storeu_ps(ci + 16, c[i][1]);
      } else if (beta == 1.f) {
        _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), c[i][0]));
        _mm512_storeu_ps(ci + 16, _mm512_add_ps(_mm512_loadu_ps(ci + 16), c[i][1]));
      } else {
        _mm512_storeu_ps(ci, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), c[i][0]));
        _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), c[i][1]));
      }
    }
    return;
  }
  alignas(64) float tile[kAvx512MR * kAvx512NR];
  for (int i = 0; i < kAvx512MR; i++) {
    _mm512_store_ps(tile + i * kAvx512NR, c[i][0]);
    _mm512_store_ps(tile + i * kAvx512NR + 16, c[i][1]);
  }
  storeTile<kAvx512MR, kAvx512NR>(tile, C, ldc, beta, mr, nr);
}

__attribute__((target("avx512f"))) static void microAvx512(int kc, const float* Ap, const float* Bp, float* C,
                                                          int ldc, float beta, int mr, int nr) {
  microAvx512Body<false>(kc, Ap, Bp, C, ldc, beta, mr, nr, nullptr);
}

__attribute__((target("avx512f"))) static void microAvx512Pf(int kc, const float* Ap, const float* Bp, float* C,
                                                            int ldc, float beta, int mr, int nr, const float* pf) {
  microAvx512Body<true>(kc, Ap, Bp, C, ldc, beta, mr, nr, pf);
}
#endif

using PrefetchKernel = void (*)(int kc, const float* Ap, const float* Bp, float* C, int ldc, float beta, int mr, int nr,
                                const float* pf);

struct KernelInfo {
  MicroKernel fn;
  int MR, NR;
  PrefetchKernel pf;  // the same micro-kernel prefetching ahead (null: none)
  int pfMinRows;      // used from this many rows of A on (below, the hardware prefetcher does as well alone)
};

// SFX_PREFETCH=0 turns the prefetching micro-kernel off (for comparisons).
static const bool kPrefetch = !(std::getenv("SFX_PREFETCH") && !std::strcmp(std::getenv("SFX_PREFETCH"), "0"));

static KernelInfo pickKernel() {
#ifdef SFX_X86
  switch (simdLevel()) {
    case Simd::Avx512: return {microAvx512, kAvx512MR, kAvx512NR, kPrefetch ? microAvx512Pf : nullptr, 1};
    // one sliver of rows (batch-1 decoding) runs 10% slower with the AVX2 kernel's prefetches, several faster
    case Simd::Avx2: return {microAvx2, kAvx2MR, kAvx2NR, kPrefetch ? microAvx2Pf : nullptr, kAvx2MR + 1};
    default: break;
  }
#endif
#if defined(__aarch64__)
  if (simdLevel() == Simd::Neon) return {microNeon, kNeonMR, kNeonNR, nullptr, 0};  // gemm_neon.cc
#endif
  return {microPortable, kPortMR, kPortNR, nullptr, 0};
}

// ---------------------------------------------------------------------------------------- packing

#ifdef SFX_X86
// Transposes 8 rows (`src`, `src + lda`, ...) of kc floats into kc groups of 8 (times alpha), group p at
// dst + p * ostride: packs an 8-row sliver of a row-major A (ostride 8) or 8 columns of a B stored
// transposed (ostride NR). 8 x 8 SIMD transposes.
__attribute__((target("avx2,fma"))) static void pack8Rows(const float* src, size_t lda, int kc, float alpha,
                                                         float* dst, int ostride) {
  const __m256 va = _mm256_set1_ps(alpha);
  int p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m256 r0 = _mm256_loadu_ps(src + p), r1 = _mm256_loadu_ps(src + lda + p);
    __m256 r2 = _mm256_loadu_ps(src + 2 * lda + p), r3 = _mm256_loadu_ps(src + 3 * lda + p);
    __m256 r4 = _mm256_loadu_ps(src + 4 * lda + p), r5 = _mm256_loadu_ps(src + 5 * lda + p);
    __m256 r6 = _mm256_loadu_ps(src + 6 * lda + p), r7 = _mm256_loadu_ps(src + 7 * lda + p);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    float* d = dst + static_cast<size_t>(p) * ostride;
    _mm256_storeu_ps(d + 0 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u0, u4, 0x20)));
    _mm256_storeu_ps(d + 1 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u1, u5, 0x20)));
    _mm256_storeu_ps(d + 2 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u2, u6, 0x20)));
    _mm256_storeu_ps(d + 3 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u3, u7, 0x20)));
    _mm256_storeu_ps(d + 4 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u0, u4, 0x31)));
    _mm256_storeu_ps(d + 5 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u1, u5, 0x31)));
    _mm256_storeu_ps(d + 6 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u2, u6, 0x31)));
    _mm256_storeu_ps(d + 7 * ostride, _mm256_mul_ps(va, _mm256_permute2f128_ps(u3, u7, 0x31)));
  }
  for (; p < kc; p++)
    for (int i = 0; i < 8; i++) dst[static_cast<size_t>(p) * ostride + i] = alpha * src[i * lda + p];
}

#endif

#ifdef SFX_X86
// Packs the full 8-row slivers of a transposed A (stored [K, M]) for rows [0, mc8) of the block: every stored
// row is read once, contiguously, and hands 8 values to each sliver (rows a few ahead are prefetched; the
// stride between them is the whole row of A).
__attribute__((target("avx2,fma"))) static void packATrans8(const float* src, size_t lda, int kc, int mc8,
                                                           float alpha, float* dst) {
  const __m256 va = _mm256_set1_ps(alpha);
  const int slivers = mc8 / 8;
  const size_t sliverStride = static_cast<size_t>(kc) * 8;
  for (int p = 0; p < kc; p++) {
    const float* row = src + static_cast<size_t>(p) * lda;
    if (p + 4 < kc)
      for (int c = 0; c < mc8; c += 16) _mm_prefetch(reinterpret_cast<const char*>(row + 4 * lda + c), _MM_HINT_T0);
    float* d = dst + static_cast<size_t>(p) * 8;
    for (int s = 0; s < slivers; s++) _mm256_storeu_ps(d + s * sliverStride, _mm256_mul_ps(va, _mm256_loadu_ps(row + s * 8)));
  }
}
#endif

#ifdef SFX_X86
// The AVX2 micro-kernel's 6-row slivers. Stores 6 floats of v (lanes 0-5) at d: 4 and 2, so nothing past
// the 6 is written.
__attribute__((target("avx2,fma"), always_inline)) static inline void store6(float* d, __m256 v) {
  _mm_storeu_ps(d, _mm256_castps256_ps128(v));
  _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), _mm256_extractf128_ps(v, 1));
}

// Packs a 6-row sliver of a row-major A (rows src, src + lda, ...; kc floats each, times alpha) k-major
// (dst[p * 6 + i]): 8 x 8 SIMD transposes of the 6 rows and two zero rows, 6 lanes of each result kept.
__attribute__((target("avx2,fma"))) static void pack6Rows(const float* src, size_t lda, int kc, float alpha, float* dst) {
  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 z = _mm256_setzero_ps();
  int p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m256 r0 = _mm256_loadu_ps(src + p), r1 = _mm256_loadu_ps(src + lda + p);
    __m256 r2 = _mm256_loadu_ps(src + 2 * lda + p), r3 = _mm256_loadu_ps(src + 3 * lda + p);
    __m256 r4 = _mm256_loadu_ps(src + 4 * lda + p), r5 = _mm256_loadu_ps(src + 5 * lda + p);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, z, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, z, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, z, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, z, _MM_SHUFFLE(3, 2, 3, 2));
    float* d = dst + static_cast<size_t>(p) * 6;
    store6(d + 0, _mm256_mul_ps(va, _mm256_permute2f128_ps(u0, u4, 0x20)));
    store6(d + 6, _mm256_mul_ps(va, _mm256_permute2f128_ps(u1, u5, 0x20)));
    store6(d + 12, _mm256_mul_ps(va, _mm256_permute2f128_ps(u2, u6, 0x20)));
    store6(d + 18, _mm256_mul_ps(va, _mm256_permute2f128_ps(u3, u7, 0x20)));
    store6(d + 24, _mm256_mul_ps(va, _mm256_permute2f128_ps(u0, u4, 0x31)));
    store6(d + 30, _mm256_mul_ps(va, _mm256_permute2f128_ps(u1, u5, 0x31)));
    store6(d + 36, _mm256_mul_ps(va, _mm256_permute2f128_ps(u2, u6, 0x31)));
    store6(d + 42, _mm256_mul_ps(va, _mm256_permute2f128_ps(u3, u7, 0x31)));
  }
  for (; p < kc; p++)
    for (int i = 0; i < 6; i++) dst[static_cast<size_t>(p) * 6 + i] = alpha * src[i * lda + p];
}

// Packs the full 6-row slivers of a transposed A (stored [K, M]) for rows [0, mc6) of the block, as
// packATrans8 does for 8-row ones: every stored row read once, 6 values (4 + 2) handed to each sliver.
__attribute__((target("avx2,fma"))) static void packATrans6(const float* src, size_t lda, int kc, int mc6,
                                                           float alpha, float* dst) {
  const __m128 va = _mm_set1_ps(alpha);
  const int slivers = mc6 / 6;
  const size_t sliverStride = static_cast<size_t>(kc) * 6;
  for (int p = 0; p < kc; p++) {
    const float* row = src + static_cast<size_t>(p) * lda;
    if (p + 4 < kc)
      for (int c = 0; c < mc6; c += 16) _mm_prefetch(reinterpret_cast<const char*>(row + 4 * lda + c), _MM_HINT_T0);
    float* d = dst + static_cast<size_t>(p) * 6;
    for (int s = 0; s < slivers; s++) {
      const float* r = row + s * 6;
      float* o = d + s * sliverStride;
      _mm_storeu_ps(o, _mm_mul_ps(va, _mm_loadu_ps(r)));
      const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(r + 4)));
      _mm_store_sd(reinterpret_cast<double*>(o + 4), _mm_castps_pd(_mm_mul_ps(va, two)));
    }
  }
}
#endif

// Packs op(A)[i0:i0+mc, p0:p0+kc] * alpha into MR-row slivers, zero-padded to a multiple of MR.
static void packA(const GemmArgs& g, int i0, int mc, int p0, int kc, int MR, float* Ap) {
  int s = 0;
#ifdef SFX_X86
  if (MR == 8 && simdLevel() != Simd::Portable) {
    if (g.ta) {
      s = mc / 8 * 8;
      if (s > 0) packATrans8(g.A + static_cast<size_t>(p0) * g.lda + i0, static_cast<size_t>(g.lda), kc, s, g.alpha, Ap);
    } else {
      for (; s + 8 <= mc; s += 8)
        pack8Rows(g.A + static_cast<size_t>(i0 + s) * g.lda + p0, static_cast<size_t>(g.lda), kc, g.alpha,
                  Ap + static_cast<size_t>(s) * kc, 8);
    }
  }
  if (MR == 6 && simdLevel() != Simd::Portable) {
    if (g.ta) {
      s = mc / 6 * 6;
      if (s > 0) packATrans6(g.A + static_cast<size_t>(p0) * g.lda + i0, static_cast<size_t>(g.lda), kc, s, g.alpha, Ap);
    } else {
      for (; s + 6 <= mc; s += 6)
        pack6Rows(g.A + static_cast<size_t>(i0 + s) * g.lda + p0, static_cast<size_t>(g.lda), kc, g.alpha,
                  Ap + static_cast<size_t>(s) * kc);
    }
  }
#endif
#if defined(__aarch64__)
  if (MR == kNeonMR && simdLevel() == Simd::Neon) s = packANeon(g, i0, mc, p0, kc, Ap);
#endif
  for (; s < mc; s += MR) {
    int mr = std::min(MR, mc - s);
    float* dst = Ap + static_cast<size_t>(s) * kc;
    if (!g.ta) {
      for (int i = 0; i < mr; i++) {
        const float* src = g.A + static_cast<size_t>(i0 + s + i) * g.lda + p0;
        for (int p = 0; p < kc; p++) dst[p * MR + i] = g.alpha * src[p];
      }
    } else {
      for (int p = 0; p < kc; p++) {
        const float* src = g.A + static_cast<size_t>(p0 + p) * g.lda + i0 + s;
        for (int i = 0; i < mr; i++) dst[p * MR + i] = g.alpha * src[i];
      }
    }
    if (mr < MR)
      for (int p = 0; p < kc; p++)
        for (int i = mr; i < MR; i++) dst[p * MR + i] = 0.f;
  }
}

// Packs a row-major op(B) = B [K, N]: each stored row is read once, contiguously, and hands NR values to
// every strip (a compile-time NR turns each copy into a few vector moves).
template <int NR>
static void packBRows(const GemmArgs& g, int p0, int kc, int j0, int nc, float* Bp) {
  const int full = nc / NR, tail = nc - full * NR;
  const size_t stripStride = static_cast<size_t>(kc) * NR;
  for (int p = 0; p < kc; p++) {
    const float* src = g.B + static_cast<size_t>(p0 + p) * g.ldb + j0;
    float* d = Bp + static_cast<size_t>(p) * NR;
    for (int s = 0; s < full; s++) std::memcpy(d + s * stripStride, src + s * NR, sizeof(float) * NR);
    if (tail) {
      float* t = d + full * stripStride;
      for (int j = 0; j < tail; j++) t[j] = src[full * NR + j];
      for (int j = tail; j < NR; j++) t[j] = 0.f;
    }
  }
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into NR-column slivers, zero-padded to a multiple of NR.
static void packB(const GemmArgs& g, int p0, int kc, int j0, int nc, int NR, float* Bp) {
  if (!g.tb) {
    if (NR == 32) return packBRows<32>(g, p0, kc, j0, nc, Bp);
    if (NR == 16) return packBRows<16>(g, p0, kc, j0, nc, Bp);
    if (NR == 12) return packBRows<12>(g, p0, kc, j0, nc, Bp);  // NEON
    for (int s = 0; s < nc; s += NR) {
      int nr = std::min(NR, nc - s);
      float* dst = Bp + static_cast<size_t>(s) * kc;
      for (int p = 0; p < kc; p++) {
        const float* src = g.B + static_cast<size_t>(p0 + p) * g.ldb + j0 + s;
        float* d = dst + p * NR;
        for (int j = 0; j < nr; j++) d[j] = src[j];
        for (int j = nr; j < NR; j++) d[j] = 0.f;
      }
    }
    return;
  }
  for (int s = 0; s < nc; s += NR) {
    int nr = std::min(NR, nc - s);
    float* dst = Bp + static_cast<size_t>(s) * kc;
    if (nr < NR)
      for (int p = 0; p < kc; p++)
        for (int j = nr; j < NR; j++) dst[p * NR + j] = 0.f;
    // Read rows of the stored [N, K] matrix contiguously: 8 at a time with SIMD transposes, then 4, then 1.
    int j = 0;
#ifdef SFX_X86
    if (simdLevel() != Simd::Portable && NR % 8 == 0) {
      for (; j + 8 <= nr; j += 8)
        pack8Rows(g.B + static_cast<size_t>(j0 + s + j) * g.ldb + p0, static_cast<size_t>(g.ldb), kc, 1.f, dst + j, NR);
    }
#endif
#if defined(__aarch64__)
    if (simdLevel() == Simd::Neon)
      for (; j + 4 <= nr; j += 4)
        packRows4Neon(g.B + static_cast<size_t>(j0 + s + j) * g.ldb + p0, static_cast<size_t>(g.ldb), kc, 1.f, dst + j, NR);
#endif
    for (; j + 4 <= nr; j += 4) {
      const float* s0 = g.B + static_cast<size_t>(j0 + s + j) * g.ldb + p0;
      const float* s1 = s0 + g.ldb;
      const float* s2 = s1 + g.ldb;
      const float* s3 = s2 + g.ldb;
      for (int p = 0; p < kc; p++) {
        float* d = dst + p * NR + j;
        d[0] = s0[p];
        d[1] = s1[p];
        d[2] = s2[p];
        d[3] = s3[p];
      }
    }
    for (; j < nr; j++) {
      const float* s0 = g.B + static_cast<size_t>(j0 + s + j) * g.ldb + p0;
      for (int p = 0; p < kc; p++) dst[p * NR + j] = s0[p];
    }
  }
}

// ------------------------------------------------------------------------------------ the driver

// Cache-block sizes (KC the most depth, MC rows of A, NC columns of B); SFX_KC / SFX_MC / SFX_NC override
// them for tuning. SFX_PACK_MB bounds the buffer of a B packed once per call (longer K is done in chunks).
static int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}
static const int kKC = std::max(8, envInt("SFX_KC", 384));
static const int kMC = envInt("SFX_MC", 96);

// The L2 cache of one core in bytes, from cpuid (0: unknown).
static size_t l2Bytes() {
#ifdef SFX_X86
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000006 && __get_cpuid(0x80000006, &a, &b, &c, &d))
    return static_cast<size_t>(c >> 16) << 10;
#endif
  return 0;
}

// NC: the KC x NC block of packed B that the slivers of A pass over must stay in L2 beside the packed
// block of A, so it gets at most 3/4 of L2: 512 columns with 1 MiB of L2 (Zen 4, Skylake-SP), 256 with
// 512 KiB (Zen 2 and 3), 128 with 256 KiB (Haswell). Never more than 512.
static int defaultNC() {
  const size_t l2 = l2Bytes();
  if (l2 == 0) return 512;
  const size_t cols = l2 * 3 / 4 / (sizeof(float) * static_cast<size_t>(kKC)) / 32 * 32;
  return static_cast<int>(std::min<size_t>(512, std::max<size_t>(128, cols)));
}
static const int kNC = envInt("SFX_NC", defaultNC());
static const int kFewRows = envInt("SFX_FEW_ROWS", 64);
static const size_t kPackBudget = static_cast<size_t>(std::max(1, envInt("SFX_PACK_MB", 32))) << 18;  // floats

static const KernelInfo& kernel() {
  static const KernelInfo k = pickKernel();
  return k;
}

struct Buffers {
  std::vector<float> a, b, shared;
  static float* ensure(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.assign(n + 64, 0.f);
    return v.data();
  }
};
static thread_local Buffers tBuffers;

// The packed layout of a whole op(B) [K, N] (packed once per call and shared by every task, or packed once
// per weight matrix by packWeight): KC-deep blocks; a block holds Npad / NR strips of kc x NR values
// (Bp[k * NR + j]); the strip at column j of the block at depth pc starts at pc * Npad + j * kc, Npad = N
// rounded up to NR.
static inline int padN(int N, int NR) { return (N + NR - 1) / NR * NR; }

// The depth of the blocks of a product with depth K: at most KC, the blocks as even as a multiple of 8
// allows (K = 512 gives 2 x 256, K = 1408 gives 4 x 352), so no short last block costs a pass over C.
static inline int blockDepth(int K) {
  int blocks = (K + kKC - 1) / kKC;
  int d = (K + blocks - 1) / blocks;
  return std::max(1, (d + 7) / 8 * 8);
}

int gemmBlockDepth(int K) { return blockDepth(K); }

// Packs the blocks of op(B) at depths [p0, p1) (p0 a multiple of the block depth) into dst, across the pool.
static void packBPanels(const GemmArgs& g, int NR, int p0, int p1, float* dst) {
  const int Npad = padN(g.N, NR);
  const int kcMax = blockDepth(g.K);
  const int group = 4 * NR;  // columns per task
  const int nGroups = (g.N + group - 1) / group;
  const int nBlocks = (p1 - p0 + kcMax - 1) / kcMax;
  parallelFor(nBlocks * nGroups, [&](int u) {
    int pc = p0 + (u / nGroups) * kcMax, kc = std::min(kcMax, p1 - pc);
    int j0 = (u % nGroups) * group, nc = std::min(group, g.N - j0);
    packB(g, pc, kc, j0, nc, NR, dst + static_cast<size_t>(pc - p0) * Npad + static_cast<size_t>(j0) * kc);
  });
}

// One task's rectangle C[m0:m1, n0:n1], packing its own B block by block: for products whose tasks do not
// share columns of B.
static void gemmRect(const GemmArgs& g, const KernelInfo& kern, int m0, int m1, int n0, int n1) {
  const int MR = kern.MR, NR = kern.NR;
  const int kcMax = blockDepth(g.K);
  const int mcMax = std::max(MR, (kMC / MR) * MR);
  for (int jc = n0; jc < n1; jc += kNC) {
    int nc = std::min(kNC, n1 - jc);
    int ncPad = (nc + NR - 1) / NR * NR;
    for (int pc = 0; pc < g.K; pc += kcMax) {
      int kc = std::min(kcMax, g.K - pc);
      float beta = pc == 0 ? g.beta : 1.f;
      float* Bp = Buffers::ensure(tBuffers.b, static_cast<size_t>(ncPad) * kc);
      packB(g, pc, kc, jc, nc, NR, Bp);
      for (int ic = m0; ic < m1; ic += mcMax) {
        int mc = std::min(mcMax, m1 - ic);
        int mcPad = (mc + MR - 1) / MR * MR;
        float* Ap = Buffers::ensure(tBuffers.a, static_cast<size_t>(mcPad) * kc);
        packA(g, ic, mc, pc, kc, MR, Ap);
        for (int ir = 0; ir < mc; ir += MR) {
          const float* a = Ap + static_cast<size_t>(ir) * kc;
          float* cRow = g.C + static_cast<size_t>(ic + ir) * g.ldc + jc;
          int mr = std::min(MR, mc - ir);
          for (int jr = 0; jr < nc; jr += NR) {
            kern.fn(kc, a, Bp + static_cast<size_t>(jr) * kc, cRow + jr, g.ldc, beta, mr, std::min(NR, nc - jr));
          }
        }
      }
    }
  }
}

// One task's rectangle C[m0:m1, n0:n1] (n0 a multiple of NR) against an already packed op(B) holding the
// depths [p0, p1): each MC x KC block of A is packed once and used against every column of the rectangle,
// NC columns at a time (that part of the packed B stays in L2 while the block's slivers pass over it).
static void gemmRectPacked(const GemmArgs& g, const KernelInfo& kern, int m0, int m1, int n0, int n1, const float* Bpk,
                           int p0, int p1) {
  const int MR = kern.MR, NR = kern.NR;
  const int kcMax = blockDepth(g.K);
  const int mcMax = std::max(MR, (kMC / MR) * MR);
  const int ncMax = std::max(NR, (kNC / NR) * NR);
  const int Npad = padN(g.N, NR);
  const bool prefetch = kern.pf && m1 - m0 >= kern.pfMinRows;  // (no prefetching kernel off x86)
#ifdef SFX_X86
  if (prefetch && m1 - m0 <= kFewRows) {
    // few rows: the rectangle's first strip of B starts on its way from memory while A is packed
    const char* first = reinterpret_cast<const char*>(Bpk + static_cast<size_t>(n0) * std::min(kcMax, p1 - p0));
    const size_t bytes = sizeof(float) * static_cast<size_t>(NR) * std::min(kcMax, p1 - p0);
    for (size_t c = 0; c < bytes; c += 64) _mm_prefetch(first + c, _MM_HINT_T1);
  }
#endif
  for (int pc = p0; pc < p1; pc += kcMax) {
    int kc = std::min(kcMax, p1 - pc);
    float beta = pc == 0 ? g.beta : 1.f;
    const float* Bblock = Bpk + static_cast<size_t>(pc - p0) * Npad;
    for (int ic = m0; ic < m1; ic += mcMax) {
      int mc = std::min(mcMax, m1 - ic);
      int mcPad = (mc + MR - 1) / MR * MR;
      float* Ap = Buffers::ensure(tBuffers.a, static_cast<size_t>(mcPad) * kc);
      packA(g, ic, mc, pc, kc, MR, Ap);
      for (int jc = n0; jc < n1; jc += ncMax) {
        int nc = std::min(ncMax, n1 - jc);
        const float* Bp = Bblock + static_cast<size_t>(jc) * kc;
        if (mc <= kFewRows) {
          // Few rows (decoding): each strip of B, likely coming from memory, serves every sliver of A at
          // once, and while the slivers pass over it the first of them fetch the next strip (or the first
          // strip of the next depth block) into L2, so reading B overlaps the arithmetic.
          const float* nextBlock = pc + kc < p1 ? Bpk + static_cast<size_t>(pc + kc - p0) * Npad +
                                                      static_cast<size_t>(n0) * std::min(kcMax, p1 - pc - kc)
                                               : nullptr;
          for (int jr = 0; jr < nc; jr += NR) {
            const float* b = Bp + static_cast<size_t>(jr) * kc;
            int nr = std::min(NR, nc - jr);
            const float* next = jc + jr + NR < n1 ? b + static_cast<size_t>(NR) * kc : nextBlock;
            for (int ir = 0; ir < mc; ir += MR) {
              float* c = g.C + static_cast<size_t>(ic + ir) * g.ldc + jc + jr;
              int part = ir / MR;  // sliver `part` fetches 16 of the next strip's NR columns
              if (prefetch && next && part * 16 < NR)
                kern.pf(kc, Ap + static_cast<size_t>(ir) * kc, b, c, g.ldc, beta, std::min(MR, mc - ir), nr,
                        next + static_cast<size_t>(part) * 16 * kc);
              else
                kern.fn(kc, Ap + static_cast<size_t>(ir) * kc, b, c, g.ldc, beta, std::min(MR, mc - ir), nr);
            }
          }
          continue;
        }
        for (int ir = 0; ir < mc; ir += MR) {
          const float* a = Ap + static_cast<size_t>(ir) * kc;
          float* cRow = g.C + static_cast<size_t>(ic + ir) * g.ldc + jc;
          int mr = std::min(MR, mc - ir);
          for (int jr = 0; jr < nc; jr += NR) {
            kern.fn(kc, a, Bp + static_cast<size_t>(jr) * kc, cRow + jr, g.ldc, beta, mr, std::min(NR, nc - jr));
          }
        }
      }
    }
  }
}

// C = beta * C for the K = 0 (or alpha = 0) case.
static void scaleC(const GemmArgs& g) {
  for (int i = 0; i < g.M; i++) {
    float* c = g.C + static_cast<size_t>(i) * g.ldc;
    for (int j = 0; j < g.N; j++) c[j] = g.beta == 0.f ? 0.f : g.beta * c[j];
  }
}

// Products of more than 4 rows go to the bf16 kernels (gemm_bf16.cc) when the precision is bf16; they take beta
// 0 or 1, so a general beta is applied to C here first. Returns whether the product was done.
static bool bf16Product(GemmArgs g, bool parallel) {
  if (g.M <= 4 || matmulPrecision() != MatmulPrecision::Bf16) return false;
  if (g.beta != 0.f && g.beta != 1.f) {
    scaleC(g);
    g.beta = 1.f;
  }
  sgemmBf16(g, parallel);
  return true;
}

// How C is split into tasks: a tm x tn grid of rectangles, each a whole number of MR x NR tiles.
struct Grid {
  int tasks, tm, tn;
};

// Small products run on the calling thread; large ones get a few rectangles per thread, taken dynamically,
// so that a thread slowed by other load on the machine does not hold up the call. Among the tm x tn
// grids, the one with the least work in its largest rectangle: multiply-adds plus packing, a packed element
// costing about as much as 16 multiply-adds (copies vs SIMD FMAs). sharedB: op(B) is packed once for all
// tasks (each task packs only its rows of A, once, and reads its columns of the packed B), else every
// task packs its own columns of B and packs its rows of A once per NC-wide column block.
static Grid chooseGrid(int M, int N, int K, int MR, int NR, bool sharedB) {
  int threads = poolThreads();
  double flops = 2.0 * M * N * static_cast<double>(K);
  // With B shared (packed once) extra rectangles cost only a little more packing of A, so mid-sized
  // products (the matrices of batched decoding) are split dynamically too.
  int tasks = flops < 2.0e6 ? 1 : (flops < (sharedB ? 2.0e7 : 1.0e8) || threads == 1 ? threads : threads * 4);
  int nStrips = (N + NR - 1) / NR, mStrips = (M + MR - 1) / MR;
  Grid best{1, 1, 1};
  double bestCost = 1e300;
  // Grids of exactly `tasks` rectangles first; a product too narrow for any of them gets the best grid of
  // fewer rectangles (cost counted in rounds of `threads` rectangles).
  for (int pass = 0; pass < 2 && bestCost == 1e300; pass++) {
    for (int a = 1; a <= std::min(tasks, mStrips); a++) {
      for (int b = 1; b <= std::min(tasks / a, nStrips); b++) {
        if (pass == 0 && a * b != tasks) continue;
        double perM = std::ceil(static_cast<double>(mStrips) / a) * MR;
        double perN = std::ceil(static_cast<double>(nStrips) / b) * NR;
        // a shared packed B is read again by every MC-row block of a task, from L3 or memory: about 8
        // multiply-adds per element (few rows, as in decoding, are bound by it: split the columns then)
        double rect = sharedB ? perM * perN * K + 16.0 * perM * K + 8.0 * perN * K * std::ceil(perM / kMC)
                              : perM * perN * K + 16.0 * (perM * K * std::ceil(perN / kNC) + perN * K);
        double cost = std::ceil(static_cast<double>(a * b) / threads) * rect +
                      (sharedB ? 16.0 * static_cast<double>(N) * K / threads : 0.0);
        if (cost < bestCost) {
          bestCost = cost;
          best = {a * b, a, b};
        }
      }
    }
  }
  return best;
}

static inline int nStripsOf(int N, int NR) { return (N + NR - 1) / NR; }

// Runs fn(m0, m1, n0, n1) for every rectangle of the grid, across the pool.
template <class Fn>
static void forEachRect(const Grid& gr, int M, int N, int MR, int NR, Fn fn) {
  int nStrips = (N + NR - 1) / NR, mStrips = (M + MR - 1) / MR;
  parallelFor(gr.tm * gr.tn, [&](int t) {
    int a = t / gr.tn, b = t % gr.tn;
    int ms0 = static_cast<int>(static_cast<long>(mStrips) * a / gr.tm), ms1 = static_cast<int>(static_cast<long>(mStrips) * (a + 1) / gr.tm);
    int ns0 = static_cast<int>(static_cast<long>(nStrips) * b / gr.tn), ns1 = static_cast<int>(static_cast<long>(nStrips) * (b + 1) / gr.tn);
    int m0 = ms0 * MR, m1 = std::min(M, ms1 * MR);
    int n0 = ns0 * NR, n1 = std::min(N, ns1 * NR);
    if (m0 < m1 && n0 < n1) fn(m0, m1, n0, n1);
  });
}

void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  GemmArgs g{transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  if (K <= 0 || alpha == 0.f) {
    scaleC(g);
    return;
  }
  if (bf16Product(g, true)) return;
  // A few rows (decoding): matrix-vector products straight from B, no packing, no padded tiles.
  if (M <= 4) {
    std::vector<float> row(transA ? static_cast<size_t>(K) : 0);
    for (int i = 0; i < M; i++) {
      const float* a = A + static_cast<size_t>(i) * lda;
      if (transA) {
        for (int p = 0; p < K; p++) row[p] = A[static_cast<size_t>(p) * lda + i];
        a = row.data();
      }
      float* c = C + static_cast<size_t>(i) * ldc;
      // tb: B is [N, K], c = alpha * B a; else B is [K, N], c = alpha * B^T a
      if (transB) sgemv(false, N, K, alpha, B, ldb, a, beta, c);
      else sgemv(true, K, N, alpha, B, ldb, a, beta, c);
    }
    return;
  }
  const KernelInfo& kern = kernel();
  const int MR = kern.MR, NR = kern.NR;
  Grid gr = chooseGrid(M, N, K, MR, NR, true);
  const int perN = (nStripsOf(N, NR) + gr.tn - 1) / gr.tn * NR;
  if (gr.tm == 1 && (perN <= kNC || M <= kMC)) {
    // Tasks split the columns only, each at most NC wide (or A is a single block): each packs its own
    // part of B and its rows of A once; nothing is packed twice.
    if (gr.tasks == 1) gemmRect(g, kern, 0, M, 0, N);
    else forEachRect(gr, M, N, MR, NR, [&](int m0, int m1, int n0, int n1) { gemmRect(g, kern, m0, m1, n0, n1); });
    return;
  }
  // Tasks split the rows (or are wider than NC, which would pack A once per NC columns): op(B) is packed
  // once, by all threads together, and read by every task, which packs each block of its rows of A once
  // (in chunks of depth when the whole packed B would exceed the buffer budget).
  const size_t Npad = static_cast<size_t>(padN(N, NR));
  int chunk = K;
  const int kcMax = blockDepth(K);
  if (Npad * K > kPackBudget) chunk = std::max(kcMax, static_cast<int>(kPackBudget / Npad) / kcMax * kcMax);
  float* Bpk = Buffers::ensure(tBuffers.shared, Npad * std::min(chunk, K));
  for (int p0 = 0; p0 < K; p0 += chunk) {
    int p1 = std::min(K, p0 + chunk);
    packBPanels(g, NR, p0, p1, Bpk);
    forEachRect(gr, M, N, MR, NR, [&](int m0, int m1, int n0, int n1) { gemmRectPacked(g, kern, m0, m1, n0, n1, Bpk, p0, p1); });
  }
}

void sgemmSerial(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  GemmArgs g{transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  if (K <= 0 || alpha == 0.f) {
    scaleC(g);
    return;
  }
  if (bf16Product(g, false)) return;
  gemmRect(g, kernel(), 0, M, 0, N);
}

// ---------------------------------------------------------------------------------- packed weights

size_t packedWeightSize(int N, int K) {
  if (N <= 0 || K <= 0) return 0;
  return static_cast<size_t>(padN(N, kernel().NR)) * K;
}

void packWeight(int N, int K, const float* W, int ldw, float* dst) {
  if (N <= 0 || K <= 0) return;
  GemmArgs g{false, true, 0, N, K, 1.f, nullptr, 0, W, ldw, 0.f, nullptr, 0};
  packBPanels(g, kernel().NR, 0, K, dst);
}

void sgemmPacked(int M, int N, int K, float alpha, const float* A, int lda, const float* Wp, float beta, float* C,
                 int ldc) {
  if (M <= 0 || N <= 0) return;
  GemmArgs g{false, true, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc};
  if (K <= 0 || alpha == 0.f) {
    scaleC(g);
    return;
  }
  const KernelInfo& kern = kernel();
  Grid gr = chooseGrid(M, N, K, kern.MR, kern.NR, true);
  if (gr.tasks == 1) {
    gemmRectPacked(g, kern, 0, M, 0, N, Wp, 0, K);
    return;
  }
  forEachRect(gr, M, N, kern.MR, kern.NR, [&](int m0, int m1, int n0, int n1) { gemmRectPacked(g, kern, m0, m1, n0, n1, Wp, 0, K); });
}

// ------------------------------------------------------------------------------------------ gemv

SFX_CLONES static void gemvRows(
    int i0, int i1, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  for (int i = i0; i < i1; i++) {
    const float* a = A + static_cast<size_t>(i) * lda;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < N; j++) s += a[j] * x[j];
    y[i] = beta == 0.f ? alpha * s : alpha * s + beta * y[i];
  }
}

SFX_CLONES static void gemvCols(
    int M, int j0, int j1, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  float* acc = y + j0;
  int n = j1 - j0;
  std::vector<float> tmp(static_cast<size_t>(n), 0.f);
  float* t = tmp.data();
  for (int i = 0; i < M; i++) {
    const float* a = A + static_cast<size_t>(i) * lda + j0;
    float xi = x[i];
#pragma omp simd
    for (int j = 0; j < n; j++) t[j] += a[j] * xi;
  }
  for (int j = 0; j < n; j++) acc[j] = beta == 0.f ? alpha * t[j] : alpha * t[j] + beta * acc[j];
}

void sgemv(bool trans, int M, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  if (M <= 0 || N <= 0) {
    int n = trans ? N : M;
    for (int i = 0; i < n; i++) y[i] = beta == 0.f ? 0.f : beta * y[i];
    return;
  }
  double work = static_cast<double>(M) * N;
  int tasks = work < 65536 ? 1 : poolThreads() * 4;
  if (!trans) {
    tasks = std::min(tasks, M);
    parallelFor(tasks, [&](int t) {
      int i0 = static_cast<int>(static_cast<long>(M) * t / tasks), i1 = static_cast<int>(static_cast<long>(M) * (t + 1) / tasks);
#if defined(__aarch64__)
      if (simdLevel() == Simd::Neon) return gemvRowsNeon(i0, i1, N, alpha, A, lda, x, beta, y);  // gemm_neon.cc
#endif
      gemvRows(i0, i1, N, alpha, A, lda, x, beta, y);
    });
  } else {
    tasks = std::min(tasks, std::max(1, N / 64));
    parallelFor(tasks, [&](int t) {
      int j0 = static_cast<int>(static_cast<long>(N) * t / tasks), j1 = static_cast<int>(static_cast<long>(N) * (t + 1) / tasks);
      gemvCols(M, j0, j1, alpha, A, lda, x, beta, y);
    });
  }
}

}  // namespace sfx
