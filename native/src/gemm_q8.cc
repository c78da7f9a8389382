// Products with a weight matrix held as int8 for sampling (a model's sampling copy, never its training
// weights): C = alpha A W^T + beta C with A [M, K] fp32 and W [N, K] quantized by rows in blocks of 32 depth,
// each block q[32] int8 with one fp32 scale s (w ~ q * s, s = max |w| / 127 of the block, q rounded to
// nearest even), the rows zero-padded to a whole number of blocks (Kp = 32 * ceil(K / 32)).
//
// Every element of C is one dot product in one fixed order, whatever M is: 16 lanes, lane l summing
// x[16j + l] * (q[16j + l] * s) for j = 0, 1, ... with a fused multiply-add each, then the lanes added in a
// fixed tree (l + 8, then + 4, + 2, + 1). So a row of C does not depend on what else is in the call (a
// sequence samples the same alone as beside others). AVX-512 holds the 16 lanes in one register, AVX2 in
// two, with the same values; the portable code sums the same lanes without fused multiply-adds.
//
// Four rows of W are multiplied at a time (four independent sums). With one row of A (decoding one
// sequence) the int8 blocks are widened as they stream from memory; with several, a group's four rows are
// widened once into fp32 (the same values: int8 to fp32 is exact and the scale product is the same
// rounding) and every row of A reads them from cache.
// Not here: choosing when int8 runs (src/model/quantized-weights.ts), the bf16 and fp32 products.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu.h"
#include "kernels.h"
#include "threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SFX_Q8_X86 1
#define SFX_Q8_AVX512 __attribute__((target("avx512f,avx512bw")))
#define SFX_Q8_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace sfx {

namespace {

constexpr int kBlock = 32;
constexpr int kRowsAtOnce = 4;

// ---- quantizing

// Row n of W (fp32 values, or bf16 bits when bf16) into q (Kp int8) and its blocks' scales.
void quantizeRow(const float* wf, const uint16_t* wb, int K, int8_t* q, float* scales) {
  const int nb = (K + kBlock - 1) / kBlock;
  float block[kBlock];
  for (int b = 0; b < nb; b++) {
    float amax = 0.f;
    for (int i = 0; i < kBlock; i++) {
      const int k = b * kBlock + i;
      float v = 0.f;
      if (k < K) {
        if (wf) v = wf[k];
        else {
          const uint32_t bits = static_cast<uint32_t>(wb[k]) << 16;
          std::memcpy(&v, &bits, sizeof v);
        }
      }
      block[i] = v;
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax / 127.f;
    scales[b] = s;
    for (int i = 0; i < kBlock; i++) {
      const float r = s > 0.f ? std::nearbyint(block[i] / s) : 0.f;
      q[b * kBlock + i] = static_cast<int8_t>(std::max(-127.f, std::min(127.f, r)));
    }
  }
}

// ---- the dot products, one per SIMD level; each writes out[r] = sum for R rows of W against x

// Lane sums in the fixed tree: 16 -> 8 -> 4 -> 2 -> 1.
inline float reduce16(const float* lanes) {
  float a[8], b[4], c[2];
  for (int l = 0; l < 8; l++) a[l] = lanes[l] + lanes[l + 8];
  for (int l = 0; l < 4; l++) b[l] = a[l] + a[l + 4];
  for (int l = 0; l < 2; l++) c[l] = b[l] + b[l + 2];
  return c[0] + c[1];
}

// Portable: the same lanes, multiply then add.
void dotsPortable(int R, const float* x, int Kp, const int8_t* const* q, const float* const* s, const float* const* wf,
                  float* out) {
  for (int r = 0; r < R; r++) {
    float lanes[16] = {};
    for (int j = 0; j < Kp / 16; j++) {
      const float scale = wf ? 0.f : s[r][j / 2];
      for (int l = 0; l < 16; l++) {
        const int k = 16 * j + l;
        const float w = wf ? wf[r][k] : static_cast<float>(q[r][k]) * scale;
        lanes[l] = lanes[l] + x[k] * w;
      }
    }
    out[r] = reduce16(lanes);
  }
}

#ifdef SFX_Q8_X86
SFX_Q8_AVX512 inline float reduce512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return reduce16(lanes);
}

// AVX-512: lane l of a register is lane l of the sum.
template <int R>
SFX_Q8_AVX512 void dotsAvx512(const float* x, int Kp, const int8_t* const* q, const float* const* s, const float* const* wf,
                              float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int j = 0; j < Kp / 16; j++) {
    const __m512 xv = _mm512_loadu_ps(x + 16 * j);
    for (int r = 0; r < R; r++) {
      __m512 w;
      if (wf) w = _mm512_loadu_ps(wf[r] + 16 * j);
      else {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + 16 * j));
        w = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), _mm512_set1_ps(s[r][j / 2]));
      }
      acc[r] = _mm512_fmadd_ps(xv, w, acc[r]);
    }
  }
  for (int r = 0; r < R; r++) out[r] = reduce512(acc[r]);
}

// AVX2: lanes 0-7 in one register, 8-15 in another.
template <int R>
SFX_Q8_AVX2 void dotsAvx2(const float* x, int Kp, const int8_t* const* q, const float* const* s, const float* const* wf,
                          float* out) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int j = 0; j < Kp / 16; j++) {
    const __m256 x0 = _mm256_loadu_ps(x + 16 * j), x1 = _mm256_loadu_ps(x + 16 * j + 8);
    for (int r = 0; r < R; r++) {
      __m256 w0, w1;
      if (wf) {
        w0 = _mm256_loadu_ps(wf[r] + 16 * j);
        w1 = _mm256_loadu_ps(wf[r] + 16 * j + 8);
      } else {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + 16 * j));
        const __m256 sv = _mm256_set1_ps(s[r][j / 2]);
        w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sv);
        w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), sv);
      }
      lo[r] = _mm256_fmadd_ps(x0, w0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x1, w1, hi[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, lo[r]);
    _mm256_store_ps(lanes + 8, hi[r]);
    out[r] = reduce16(lanes);
  }
}
#endif

// out[r] = the dot product of x (Kp values) with row r of W (R <= 4 rows: int8 q[r] and scales s[r], or,
// with wf, the same row already widened), at the process's SIMD level.
void dots(int R, const float* x, int Kp, const int8_t* const* q, const float* const* s, const float* const* wf, float* out) {
#ifdef SFX_Q8_X86
  const Simd level = simdLevel();
  if (level == Simd::Avx512) {
    switch (R) {
      case 4: return dotsAvx512<4>(x, Kp, q, s, wf, out);
      case 3: return dotsAvx512<3>(x, Kp, q, s, wf, out);
      case 2: return dotsAvx512<2>(x, Kp, q, s, wf, out);
      default: return dotsAvx512<1>(x, Kp, q, s, wf, out);
    }
  }
  if (level == Simd::Avx2) {
    switch (R) {
      case 4: return dotsAvx2<4>(x, Kp, q, s, wf, out);
      case 3: return dotsAvx2<3>(x, Kp, q, s, wf, out);
      case 2: return dotsAvx2<2>(x, Kp, q, s, wf, out);
      default: return dotsAvx2<1>(x, Kp, q, s, wf, out);
    }
  }
#endif
  dotsPortable(R, x, Kp, q, s, wf, out);
}

// Row r of W widened: wf[k] = q[k] * s[k / 32] (the products dots computes from q, bit for bit).
void widenRow(const int8_t* q, const float* s, int Kp, float* wf) {
  for (int k = 0; k < Kp; k++) wf[k] = static_cast<float>(q[k]) * s[k / kBlock];
}

}  // namespace

int q8PaddedDepth(int K) { return (K + kBlock - 1) / kBlock * kBlock; }

void quantizeQ8(int N, int K, const float* wf, const uint16_t* wb, int ldw, int8_t* q, float* scales) {
  const int Kp = q8PaddedDepth(K), nb = Kp / kBlock;
  const int chunks = std::min(N, 4 * poolThreads());
  parallelFor(chunks, [&](int c) {
    for (int n = static_cast<int>(static_cast<int64_t>(N) * c / chunks); n < static_cast<int64_t>(N) * (c + 1) / chunks; n++)
      quantizeRow(wf ? wf + static_cast<size_t>(n) * ldw : nullptr, wb ? wb + static_cast<size_t>(n) * ldw : nullptr, K,
                  q + static_cast<size_t>(n) * Kp, scales + static_cast<size_t>(n) * nb);
  });
}

void gemmQ8(int M, int N, int K, float alpha, const float* A, int lda, const int8_t* q, const float* scales, float beta,
            float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const int Kp = q8PaddedDepth(K), nb = Kp / kBlock;
  // A's rows zero-padded to Kp
  std::vector<float> xs(static_cast<size_t>(M) * Kp, 0.f);
  for (int m = 0; m < M; m++) std::memcpy(xs.data() + static_cast<size_t>(m) * Kp, A + static_cast<size_t>(m) * lda, sizeof(float) * K);
  const int groups = (N + kRowsAtOnce - 1) / kRowsAtOnce;
  const int tasks = std::min(groups, M == 1 ? poolThreads() : 4 * poolThreads());
  auto store = [&](int m, int n, float dot) {
    float& c = C[static_cast<size_t>(m) * ldc + n];
    c = beta == 0.f ? alpha * dot : alpha * dot + beta * c;
  };
  parallelFor(tasks, [&](int t) {
    std::vector<float> wide(M > 1 ? static_cast<size_t>(kRowsAtOnce) * Kp : 0);
    for (int g = static_cast<int>(static_cast<int64_t>(groups) * t / tasks); g < static_cast<int64_t>(groups) * (t + 1) / tasks; g++) {
      const int n0 = g * kRowsAtOnce, R = std::min(kRowsAtOnce, N - n0);
      const int8_t* qr[kRowsAtOnce];
      const float* sr[kRowsAtOnce];
      const float* wr[kRowsAtOnce];
      for (int r = 0; r < R; r++) {
        qr[r] = q + static_cast<size_t>(n0 + r) * Kp;
        sr[r] = scales + static_cast<size_t>(n0 + r) * nb;
        if (M > 1) {
          wr[r] = wide.data() + static_cast<size_t>(r) * Kp;
          widenRow(qr[r], sr[r], Kp, wide.data() + static_cast<size_t>(r) * Kp);
        }
      }
      float out[kRowsAtOnce];
      for (int m = 0; m < M; m++) {
        dots(R, xs.data() + static_cast<size_t>(m) * Kp, Kp, qr, sr, M > 1 ? wr : nullptr, out);
        for (int r = 0; r < R; r++) store(m, n0 + r, out[r]);
      }
    }
  });
}

}  // namespace sfx
