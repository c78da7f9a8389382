// The fp32 GEMM's NEON code for AArch64 (Apple Silicon, Graviton): an 8 x 12 register-blocked micro-kernel,
// the packing of A into its 8-row slivers, the 4 x 4 transposes that pack a B stored transposed, and the
// row dot products of sgemv (y = A x). NEON
// is part of every AArch64 CPU, so there is no run-time check: gemm.cc's driver (blocking, the rest of the
// packing, threads) picks these when simdLevel() is Neon.
// The kernel holds the 8 x 12 tile of C in 24 of the 32 q registers; each step of depth loads three vectors
// of a B row and two of the A sliver and does 24 FMAs, each multiplying a B vector by one lane of A
// (vfmaq_laneq_f32, so A needs no broadcast). A sliver of 1, 2 or at most 4 rows (few rows: decoding)
// computes only those; each row's values are the same as in a full sliver (the same FMAs in the same
// order), so a row of C never depends on how many rows the product has.
// Not here: the x86 kernels, the portable kernel, packing of B and the driver (gemm.cc); bf16 (gemm_bf16.cc).
#include "gemm_neon.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstddef>

namespace sfx {

#define SFX_NEON_ROWS(X) X(0, a0, 0) X(1, a0, 1) X(2, a0, 2) X(3, a0, 3) X(4, a1, 0) X(5, a1, 1) X(6, a1, 2) X(7, a1, 3)

// kRows: 8 (a full sliver), or 1, 2 or 4 for a sliver of at most that many rows (the rest are not computed).
template <int kRows>
__attribute__((always_inline)) static inline void microNeonBody(int kc, const float* Ap, const float* Bp, float* C,
                                                                int ldc, float beta, int mr, int nr) {
  // The accumulators are named variables, not an array, so that none of them lives in memory.
#define SFX_ZERO(i, av, lane) float32x4_t c##i##0 = vdupq_n_f32(0.f), c##i##1 = c##i##0, c##i##2 = c##i##0;
  SFX_NEON_ROWS(SFX_ZERO)
#undef SFX_ZERO
  // the tile of C is written after the loop: start fetching its rows now
  for (int i = 0; i < mr; i++) __builtin_prefetch(C + static_cast<size_t>(i) * ldc, 1, 3);
#define SFX_FMA(i, av, lane)                                \
  if constexpr (i < kRows) {                                \
    c##i##0 = vfmaq_laneq_f32(c##i##0, b0, av, lane);       \
    c##i##1 = vfmaq_laneq_f32(c##i##1, b1, av, lane);       \
    c##i##2 = vfmaq_laneq_f32(c##i##2, b2, av, lane);       \
  }
#pragma GCC unroll 4
  for (int k = 0; k < kc; k++) {
    const float* b = Bp + k * kNeonNR;
    const float* a = Ap + k * kNeonMR;
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
    const float32x4_t a0 = vld1q_f32(a);
    const float32x4_t a1 = kRows > 4 ? vld1q_f32(a + 4) : a0;
    SFX_NEON_ROWS(SFX_FMA)
  }
#undef SFX_FMA
  if (kRows == kNeonMR && mr == kNeonMR && nr == kNeonNR) {
    const float32x4_t vb = vdupq_n_f32(beta);
#define SFX_UPDATE(i, av, lane)                                                                    \
  {                                                                                                \
    float* ci = C + static_cast<size_t>(i) * ldc;                                                  \
    if (beta == 0.f) {                                                                             \
      vst1q_f32(ci, c##i##0);                                                                      \
      vst1q_f32(ci + 4, c##i##1);                                                                  \
      vst1q_f32(ci + 8, c##i##2);                                                                  \
    } else if (beta == 1.f) {                                                                      \
      vst1q_f32(ci, vaddq_f32(vld1q_f32(ci), c##i##0));                                            \
      vst1q_f32(ci + 4, vaddq_f32(vld1q_f32(ci + 4), c##i##1));                                    \
      vst1q_f32(ci + 8, vaddq_f32(vld1q_f32(ci + 8), c##i##2));                                    \
    } else {                                                                                       \
      vst1q_f32(ci, vfmaq_f32(c##i##0, vb, vld1q_f32(ci)));                                        \
      vst1q_f32(ci + 4, vfmaq_f32(c##i##1, vb, vld1q_f32(ci + 4)));                                \
      vst1q_f32(ci + 8, vfmaq_f32(c##i##2, vb, vld1q_f32(ci + 8)));                                \
    }                                                                                              \
  }
    SFX_NEON_ROWS(SFX_UPDATE)
#undef SFX_UPDATE
    return;
  }
  // An edge tile: the computed rows go through a scratch tile, and only the valid part reaches C.
  alignas(16) float tile[kNeonMR * kNeonNR];
#define SFX_TILE(i, av, lane)                   \
  if constexpr (i < kRows) {                    \
    vst1q_f32(tile + i * kNeonNR, c##i##0);     \
    vst1q_f32(tile + i * kNeonNR + 4, c##i##1); \
    vst1q_f32(tile + i * kNeonNR + 8, c##i##2); \
  }
  SFX_NEON_ROWS(SFX_TILE)
#undef SFX_TILE
  for (int i = 0; i < mr; i++) {
    float* c = C + static_cast<size_t>(i) * ldc;
    const float* t = tile + i * kNeonNR;
    if (beta == 0.f) {
      for (int j = 0; j < nr; j++) c[j] = t[j];
    } else if (beta == 1.f) {
      for (int j = 0; j < nr; j++) c[j] += t[j];
    } else {
      for (int j = 0; j < nr; j++) c[j] = beta * c[j] + t[j];
    }
  }
}
#undef SFX_NEON_ROWS

void microNeon(int kc, const float* Ap, const float* Bp, float* C, int ldc, float beta, int mr, int nr) {
  switch (mr) {
    case 1: return microNeonBody<1>(kc, Ap, Bp, C, ldc, beta, mr, nr);
    case 2: return microNeonBody<2>(kc, Ap, Bp, C, ldc, beta, mr, nr);
    case 3:
    case 4: return microNeonBody<4>(kc, Ap, Bp, C, ldc, beta, mr, nr);
    default: return microNeonBody<8>(kc, Ap, Bp, C, ldc, beta, mr, nr);
  }
}

void packRows4Neon(const float* src, size_t ld, int kc, float alpha, float* dst, int ostride) {
  const float32x4_t va = vdupq_n_f32(alpha);
  int p = 0;
  for (; p + 4 <= kc; p += 4) {
    const float* r = src + p;
    const float32x4_t r0 = vld1q_f32(r), r1 = vld1q_f32(r + ld), r2 = vld1q_f32(r + 2 * ld), r3 = vld1q_f32(r + 3 * ld);
    // rows r0-r3 to columns: transpose the 2 x 2 blocks of lanes, then of 64-bit halves
    const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1), t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
    const float32x4_t c0 = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    const float32x4_t c1 = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    const float32x4_t c2 = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    const float32x4_t c3 = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    float* d = dst + static_cast<size_t>(p) * ostride;
    vst1q_f32(d, vmulq_f32(va, c0));
    vst1q_f32(d + ostride, vmulq_f32(va, c1));
    vst1q_f32(d + 2 * ostride, vmulq_f32(va, c2));
    vst1q_f32(d + 3 * ostride, vmulq_f32(va, c3));
  }
  for (; p < kc; p++)
    for (int i = 0; i < 4; i++) dst[static_cast<size_t>(p) * ostride + i] = alpha * src[i * ld + p];
}

int packANeon(const GemmArgs& g, int i0, int mc, int p0, int kc, float* Ap) {
  const int full = mc / kNeonMR * kNeonMR;
  const size_t lda = static_cast<size_t>(g.lda);
  if (g.ta) {
    // A stored [K, M]: each stored row hands 8 contiguous values to every sliver.
    const float32x4_t va = vdupq_n_f32(g.alpha);
    const size_t sliverStride = static_cast<size_t>(kc) * kNeonMR;
    for (int p = 0; p < kc; p++) {
      const float* row = g.A + static_cast<size_t>(p0 + p) * lda + i0;
      float* d = Ap + static_cast<size_t>(p) * kNeonMR;
      for (int s = 0; s < full; s += kNeonMR, d += sliverStride) {
        vst1q_f32(d, vmulq_f32(va, vld1q_f32(row + s)));
        vst1q_f32(d + 4, vmulq_f32(va, vld1q_f32(row + s + 4)));
      }
    }
    return full;
  }
  // A stored [M, K]: each sliver is two 4-row transposes (rows 0-3 to lanes 0-3, rows 4-7 to lanes 4-7).
  for (int s = 0; s < full; s += kNeonMR) {
    const float* src = g.A + static_cast<size_t>(i0 + s) * lda + p0;
    float* dst = Ap + static_cast<size_t>(s) * kc;
    packRows4Neon(src, lda, kc, g.alpha, dst, kNeonMR);
    packRows4Neon(src + 4 * lda, lda, kc, g.alpha, dst + 4, kNeonMR);
  }
  return full;
}

void gemvRowsNeon(int i0, int i1, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  for (int i = i0; i < i1; i++) {
    const float* a = A + static_cast<size_t>(i) * lda;
    // four independent sums, so that each FMA need not wait for the one before it
    float32x4_t s0 = vdupq_n_f32(0.f), s1 = s0, s2 = s0, s3 = s0;
    int j = 0;
    for (; j + 16 <= N; j += 16) {
      s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(x + j));
      s1 = vfmaq_f32(s1, vld1q_f32(a + j + 4), vld1q_f32(x + j + 4));
      s2 = vfmaq_f32(s2, vld1q_f32(a + j + 8), vld1q_f32(x + j + 8));
      s3 = vfmaq_f32(s3, vld1q_f32(a + j + 12), vld1q_f32(x + j + 12));
    }
    for (; j + 4 <= N; j += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(x + j));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; j < N; j++) s += a[j] * x[j];
    y[i] = beta == 0.f ? alpha * s : alpha * s + beta * y[i];
  }
}

}  // namespace sfx
#endif
