// Products with a weight matrix held as int8 for sampling (a model's sampling copy, never its training
// weights): C = alpha A W^T + beta C with A [M, K] fp32 and W [N, K] quantized by rows in blocks of 32 depth,
// each block q[32] int8 with one fp32 scale s (w ~ q * s, s = max |w| / 127 of the block, q rounded to
// nearest even), the rows zero-padded to a whole number of blocks (Kp = 32 * ceil(K / 32)).
//
// Every element of C is one dot product in one fixed order, whatever M is: 16 lanes; for each block b of
// 32, lane l forms t = x[32b + l] q[32b + l] + x[32b + 16 + l] q[32b + 16 + l] and adds t * s[b] to its
// sum (fused multiply-adds), then the lanes are added in a fixed tree (l + 8, then + 4, + 2, + 1). So a row
// of C does not depend on what else is in the call (a sequence samples the same alone as beside others).
// AVX-512 holds the 16 lanes in one register, AVX2 in two, with the same values; the portable code sums
// the same lanes without fused multiply-adds, as the reference kernels do.
//
// Four rows of W are multiplied at a time (four independent sums), by two rows of A at a time where there
// are several. With one row of A (decoding one sequence) the int8 values are widened as they stream from
// memory; with several, a group's four rows are widened once into fp32 (the same numbers: int8 to fp32 is
// exact) and every row of A reads them from cache.
// Not here: choosing when int8 runs (src/model/quantized-weights.ts), the bf16 and fp32 products.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu.h"
#include "kernels.h"
#include "simd_math.h"
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
constexpr size_t kPrefetchBytes = 16384;  // how far ahead of the group being multiplied W is prefetched

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

// ---- the dot products, one per SIMD level: out[m][r] for MX rows of A against R rows of W

// Lane sums in the fixed tree: 16 -> 8 -> 4 -> 2 -> 1.
inline float reduce16(const float* lanes) {
  float a[8], b[4], c[2];
  for (int l = 0; l < 8; l++) a[l] = lanes[l] + lanes[l + 8];
  for (int l = 0; l < 4; l++) b[l] = a[l] + a[l + 4];
  for (int l = 0; l < 2; l++) c[l] = b[l] + b[l + 2];
  return c[0] + c[1];
}

// A row of W as the dot products read it: int8 values and block scales, or the values already widened to
// fp32 (the same numbers: int8 to fp32 is exact) with the same scales.
struct Q8Rows {
  const int8_t* q[kRowsAtOnce];
  const float* wide[kRowsAtOnce];  // null: widen q as it streams
  const float* s[kRowsAtOnce];
};

// Portable: the same lanes and order without fused multiply-adds (the reference kernels' arithmetic).
void dotsPortable(int MX, int R, const float* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) {
      float lanes[16] = {};
      for (int b = 0; b < Kp / kBlock; b++) {
        const int k = b * kBlock;
        for (int l = 0; l < 16; l++) {
          const float w0 = w.wide[r] ? w.wide[r][k + l] : static_cast<float>(w.q[r][k + l]);
          const float w1 = w.wide[r] ? w.wide[r][k + 16 + l] : static_cast<float>(w.q[r][k + 16 + l]);
          float t = x[m][k + l] * w0;
          t = t + x[m][k + 16 + l] * w1;
          lanes[l] = lanes[l] + t * w.s[r][b];
        }
      }
      out[m][r] = reduce16(lanes);
    }
}

#ifdef SFX_Q8_X86
SFX_Q8_AVX512 inline float reduce512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return reduce16(lanes);
}

// AVX-512: lane l of a register is lane l of the sum; per block of 32, t = x[0:16] w[0:16], t += x[16:32]
// w[16:32], sum += t * scale.
template <int MX, int R>
SFX_Q8_AVX512 void dotsAvx512(const float* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  __m512 acc[MX][R];
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
  for (int b = 0; b < Kp / kBlock; b++) {
    const int k = b * kBlock;
    __m512 x0[MX], x1[MX];
    for (int m = 0; m < MX; m++) {
      x0[m] = _mm512_loadu_ps(x[m] + k);
      x1[m] = _mm512_loadu_ps(x[m] + k + 16);
    }
    for (int r = 0; r < R; r++) {
      __m512 w0, w1;
      if (w.wide[r]) {
        w0 = _mm512_loadu_ps(w.wide[r] + k);
        w1 = _mm512_loadu_ps(w.wide[r] + k + 16);
      } else {
        w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q[r] + k))));
        w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q[r] + k + 16))));
      }
      const __m512 scale = _mm512_set1_ps(w.s[r][b]);
      for (int m = 0; m < MX; m++) acc[m][r] = _mm512_fmadd_ps(_mm512_fmadd_ps(x1[m], w1, _mm512_mul_ps(x0[m], w0)), scale, acc[m][r]);
    }
  }
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) out[m][r] = reduce512(acc[m][r]);
}

// AVX2: lanes 0-7 in one register, 8-15 in another; one row of A at a time (16 registers).
template <int R>
SFX_Q8_AVX2 void dotsAvx2(const float* x, int Kp, const Q8Rows& w, float* out) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int b = 0; b < Kp / kBlock; b++) {
    const int k = b * kBlock;
    for (int r = 0; r < R; r++) {
      __m256 v[4];
      for (int h = 0; h < 4; h++) {
        if (w.wide[r]) v[h] = _mm256_loadu_ps(w.wide[r] + k + 8 * h);
        else v[h] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.q[r] + k + 8 * h))));
      }
      const __m256 scale = _mm256_set1_ps(w.s[r][b]);
      const __m256 t0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 16), v[2], _mm256_mul_ps(_mm256_loadu_ps(x + k), v[0]));
      const __m256 t1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 24), v[3], _mm256_mul_ps(_mm256_loadu_ps(x + k + 8), v[1]));
      lo[r] = _mm256_fmadd_ps(t0, scale, lo[r]);
      hi[r] = _mm256_fmadd_ps(t1, scale, hi[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, lo[r]);
    _mm256_store_ps(lanes + 8, hi[r]);
    out[r] = reduce16(lanes);
  }
}

template <int MX>
SFX_Q8_AVX512 void dotsAvx512Rows(int R, const float* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  switch (R) {
    case 4: return dotsAvx512<MX, 4>(x, Kp, w, out);
    case 3: return dotsAvx512<MX, 3>(x, Kp, w, out);
    case 2: return dotsAvx512<MX, 2>(x, Kp, w, out);
    default: return dotsAvx512<MX, 1>(x, Kp, w, out);
  }
}
#endif

// out[m][r] = the dot product of row m of A (MX <= 2 rows of Kp values) with row r of W (R <= 4), at the
// process's SIMD level; every (m, r) is computed by the same instructions whatever MX and R are.
void dots(int MX, int R, const float* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
#ifdef SFX_Q8_X86
  const Simd level = simdLevel();
  if (level == Simd::Avx512) return MX == 2 ? dotsAvx512Rows<2>(R, x, Kp, w, out) : dotsAvx512Rows<1>(R, x, Kp, w, out);
  if (level == Simd::Avx2) {
    for (int m = 0; m < MX; m++) {
      switch (R) {
        case 4: dotsAvx2<4>(x[m], Kp, w, out[m]); break;
        case 3: dotsAvx2<3>(x[m], Kp, w, out[m]); break;
        case 2: dotsAvx2<2>(x[m], Kp, w, out[m]); break;
        default: dotsAvx2<1>(x[m], Kp, w, out[m]); break;
      }
    }
    return;
  }
#endif
  dotsPortable(MX, R, x, Kp, w, out);
}

// Row r of W widened to fp32 (exact).
SFX_CLONES void widenRow(const int8_t* __restrict q, int Kp, float* __restrict wf) {
#pragma omp simd
  for (int k = 0; k < Kp; k++) wf[k] = static_cast<float>(q[k]);
}

// Prefetches [p, p + bytes) into L2, a cache line at a time in address order.
inline void prefetchL2(const void* p, size_t bytes) {
#ifdef SFX_Q8_X86
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T1);
#else
  (void)p;
  (void)bytes;
#endif
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
      // a group's rows are read side by side, too short a stream each for the CPU's own prefetching: the
      // values and scales of the group about kPrefetchBytes ahead are prefetched, in address order
      const int groupsAhead = std::max(1, static_cast<int>(kPrefetchBytes / (static_cast<size_t>(kRowsAtOnce) * Kp)));
      const int ahead = n0 + groupsAhead * kRowsAtOnce;
      if (ahead < N) {
        const int rows = std::min(kRowsAtOnce, N - ahead);
        prefetchL2(q + static_cast<size_t>(ahead) * Kp, static_cast<size_t>(rows) * Kp);
        prefetchL2(scales + static_cast<size_t>(ahead) * nb, static_cast<size_t>(rows) * nb * sizeof(float));
      }
      Q8Rows w{};
      for (int r = 0; r < R; r++) {
        w.q[r] = q + static_cast<size_t>(n0 + r) * Kp;
        w.s[r] = scales + static_cast<size_t>(n0 + r) * nb;
        if (M > 1) {
          float* row = wide.data() + static_cast<size_t>(r) * Kp;
          widenRow(w.q[r], Kp, row);
          w.wide[r] = row;
        }
      }
      float out[2][kRowsAtOnce];
      for (int m = 0; m < M; m += 2) {
        const int MX = std::min(2, M - m);
        const float* x[2] = {xs.data() + static_cast<size_t>(m) * Kp, xs.data() + static_cast<size_t>(m + MX - 1) * Kp};
        dots(MX, R, x, Kp, w, out);
        for (int i = 0; i < MX; i++)
          for (int r = 0; r < R; r++) store(m + i, n0 + r, out[i][r]);
      }
    }
  });
}

}  // namespace sfx
