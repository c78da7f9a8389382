// Products with a weight matrix held as int8 for sampling (a model's sampling copy, never its training
// weights): C = alpha A W^T + beta C with A [M, K] fp32 and W [N, K] quantized by rows in blocks of 32 depth,
// each block q[32] int8 with one fp32 scale s (w ~ q * s, s = max |w| / 127 of the block, q rounded to
// nearest even), the rows zero-padded to a whole number of blocks (Kp = 32 * ceil(K / 32)).
//
// Each row of A is quantized the same way, per block of 32 (x ~ xq * sx, as llama.cpp's Q8_0 products
// quantize theirs), and each element of C is one dot product in one fixed order, whatever M is: the 32
// integer products of a block fall into 8 lanes of 4 consecutive ones, summed exactly in int32; lane l of
// block b adds its sum times (s[b] * sx[b]) into float lane l + 8 (b % 2) with a fused multiply-add; then
// the 16 float lanes are added in a fixed tree (l + 8, then + 4, + 2, + 1). So a row of C does not depend on
// what else is in the call (a sequence samples the same alone as beside others). With AVX512-VNNI one
// vpdpbusd multiplies two blocks (|xq| unsigned times q with xq's sign); with AVX2, vpmaddubsw and vpmaddwd
// give the same int32 lanes (|xq| and |q| are at most 127, so the 16-bit pair sums cannot saturate): the
// two paths agree bit for bit. The portable code sums the same lanes without fused multiply-adds, as the
// reference kernels do.
//
// Four rows of W are multiplied at a time (four independent sums), by two rows of A at a time where there
// are several; the group of rows about 16 KiB ahead is prefetched into L2, since four rows read side by
// side are too short a stream each for the CPU's own prefetching.
// Not here: choosing when int8 runs (src/model/quantized-weights.ts), the bf16 and fp32 products.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu.h"
#include "kernels.h"
#include "prefetch.h"
#include "threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SFX_Q8_X86 1
#include <cpuid.h>
#define SFX_Q8_AVX512 __attribute__((target("avx512f,avx512bw")))
#define SFX_Q8_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
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

// ---- a row of A, quantized

// Row m of A quantized by blocks of 32 (zero past K): xq (int8, rounded to nearest even), its magnitudes
// xa (unsigned), and each block's scale sx = max |x| / 127 (x times alpha first, as in C = alpha A W^T).
struct Q8Row {
  std::vector<int8_t> xq;
  std::vector<uint8_t> xa;
  std::vector<float> sx;
};

void quantizeActivations(const float* a, int K, int Kp, float alpha, Q8Row& row) {
  const int nb = Kp / kBlock;
  row.xq.assign(Kp, 0);
  row.xa.assign(Kp, 0);
  row.sx.assign(nb, 0.f);
  float block[kBlock];
  for (int b = 0; b < nb; b++) {
    float amax = 0.f;
    for (int i = 0; i < kBlock; i++) {
      const int k = b * kBlock + i;
      block[i] = k < K ? a[k] * alpha : 0.f;
      amax = std::max(amax, std::fabs(block[i]));
    }
    const float s = amax / 127.f;
    row.sx[b] = s;
    if (s == 0.f) continue;
    for (int i = 0; i < kBlock; i++) {
      const float r = std::max(-127.f, std::min(127.f, std::nearbyint(block[i] / s)));
      row.xq[b * kBlock + i] = static_cast<int8_t>(r);
      row.xa[b * kBlock + i] = static_cast<uint8_t>(std::fabs(r));
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

// R <= 4 rows of W as the dot products read them: int8 values and block scales.
struct Q8Rows {
  const int8_t* q[kRowsAtOnce];
  const float* s[kRowsAtOnce];
};

// Portable: the same lanes and order without fused multiply-adds (the reference kernels' arithmetic).
void dotsPortable(int MX, int R, const Q8Row* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) {
      float lanes[16] = {};
      for (int b = 0; b < Kp / kBlock; b++) {
        const float scale = w.s[r][b] * x[m]->sx[b];
        for (int l = 0; l < 8; l++) {
          int32_t p = 0;
          for (int i = 0; i < 4; i++) {
            const int k = b * kBlock + 4 * l + i;
            p += static_cast<int32_t>(x[m]->xq[k]) * w.q[r][k];
          }
          float& lane = lanes[l + 8 * (b % 2)];
          lane = lane + static_cast<float>(p) * scale;
        }
      }
      out[m][r] = reduce16(lanes);
    }
}

#ifdef SFX_Q8_X86
// cpuid reports AVX512-VNNI (with AVX-512 F and BW in use: simdLevel() is Avx512).
bool detectVnni() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return c & (1u << 11);
}

SFX_Q8_AVX512 inline float reduce512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return reduce16(lanes);
}

// AVX512-VNNI: blocks b, b + 1 in one register (lanes 0-7, 8-15), as the float lanes are laid out.
template <int MX, int R>
SFX_Q8_VNNI void dotsVnni(const Q8Row* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  __m512 acc[MX][R];
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
  const int nb = Kp / kBlock;
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);  // s[b] x 8, s[b + 1] x 8
  for (int b = 0; b < nb; b += 2) {
    const int k = b * kBlock;
    const bool pair = b + 1 < nb;
    const __mmask64 bytes = pair ? ~0ull : 0xffffffffull;
    __m512i xa[MX];
    __mmask64 neg[MX];
    __m512 sx[MX];
    for (int m = 0; m < MX; m++) {
      xa[m] = _mm512_maskz_loadu_epi8(bytes, x[m]->xa.data() + k);
      neg[m] = _mm512_movepi8_mask(_mm512_maskz_loadu_epi8(bytes, x[m]->xq.data() + k));
      sx[m] = _mm512_insertf32x8(_mm512_set1_ps(x[m]->sx[b]), _mm256_set1_ps(pair ? x[m]->sx[b + 1] : 0.f), 1);
    }
    for (int r = 0; r < R; r++) {
      const __m512i q = _mm512_maskz_loadu_epi8(bytes, w.q[r] + k);
      const __m512 sw = pair ? _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(w.s[r] + b)))))
                             : _mm512_maskz_mov_ps(0x00ff, _mm512_set1_ps(w.s[r][b]));
      for (int m = 0; m < MX; m++) {
        const __m512i qs = _mm512_mask_sub_epi8(q, neg[m], _mm512_setzero_si512(), q);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xa[m], qs);
        acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw, sx[m]), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MX; m++)
    for (int r = 0; r < R; r++) out[m][r] = reduce512(acc[m][r]);
}

// AVX2: float lanes 0-7 (even blocks) in one register, 8-15 (odd blocks) in another; one row of A at a time.
template <int R>
SFX_Q8_AVX2 void dotsAvx2(const Q8Row& x, int Kp, const Q8Rows& w, float* out) {
  __m256 acc[2][R];
  for (int h = 0; h < 2; h++)
    for (int r = 0; r < R; r++) acc[h][r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < Kp / kBlock; b++) {
    const int k = b * kBlock;
    const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.xa.data() + k));
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.xq.data() + k));
    for (int r = 0; r < R; r++) {
      const __m256i qs = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q[r] + k)), xq);
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(xa, qs), ones);
      acc[b % 2][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(w.s[r][b] * x.sx[b]), acc[b % 2][r]);
    }
  }
  for (int r = 0; r < R; r++) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, acc[0][r]);
    _mm256_store_ps(lanes + 8, acc[1][r]);
    out[r] = reduce16(lanes);
  }
}

template <int MX>
SFX_Q8_VNNI void dotsVnniRows(int R, const Q8Row* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
  switch (R) {
    case 4: return dotsVnni<MX, 4>(x, Kp, w, out);
    case 3: return dotsVnni<MX, 3>(x, Kp, w, out);
    case 2: return dotsVnni<MX, 2>(x, Kp, w, out);
    default: return dotsVnni<MX, 1>(x, Kp, w, out);
  }
}
#endif

// out[m][r] = the dot product of row m of A (MX <= 2 quantized rows) with row r of W (R <= 4), at the
// process's SIMD level; every (m, r) is computed by the same instructions whatever MX and R are.
void dots(int MX, int R, const Q8Row* const* x, int Kp, const Q8Rows& w, float out[][kRowsAtOnce]) {
#ifdef SFX_Q8_X86
  static const bool vnni = simdLevel() == Simd::Avx512 && detectVnni();
  if (vnni) return MX == 2 ? dotsVnniRows<2>(R, x, Kp, w, out) : dotsVnniRows<1>(R, x, Kp, w, out);
  if (simdLevel() == Simd::Avx2 || simdLevel() == Simd::Avx512) {
    for (int m = 0; m < MX; m++) {
      switch (R) {
        case 4: dotsAvx2<4>(*x[m], Kp, w, out[m]); break;
        case 3: dotsAvx2<3>(*x[m], Kp, w, out[m]); break;
        case 2: dotsAvx2<2>(*x[m], Kp, w, out[m]); break;
        default: dotsAvx2<1>(*x[m], Kp, w, out[m]); break;
      }
    }
    return;
  }
#endif
  dotsPortable(MX, R, x, Kp, w, out);
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
  std::vector<Q8Row> xs(M);
  for (int m = 0; m < M; m++) quantizeActivations(A + static_cast<size_t>(m) * lda, K, Kp, alpha, xs[m]);
  const int groups = (N + kRowsAtOnce - 1) / kRowsAtOnce;
  const int tasks = std::min(groups, M == 1 ? poolThreads() : 4 * poolThreads());
  auto store = [&](int m, int n, float dot) {
    float& c = C[static_cast<size_t>(m) * ldc + n];
    c = beta == 0.f ? dot : dot + beta * c;
  };
  parallelFor(tasks, [&](int t) {
    for (int g = static_cast<int>(static_cast<int64_t>(groups) * t / tasks); g < static_cast<int64_t>(groups) * (t + 1) / tasks; g++) {
      const int n0 = g * kRowsAtOnce, R = std::min(kRowsAtOnce, N - n0);
      const int groupsAhead = std::max(1, static_cast<int>(kPrefetchBytes / (static_cast<size_t>(kRowsAtOnce) * Kp)));
      const int ahead = n0 + groupsAhead * kRowsAtOnce;
      if (ahead < N) {
        const int rows = std::min(kRowsAtOnce, N - ahead);
        PrefetchAhead(q + static_cast<size_t>(ahead) * Kp, static_cast<size_t>(rows) * Kp, 1).step(0);
        PrefetchAhead(scales + static_cast<size_t>(ahead) * nb, static_cast<size_t>(rows) * nb * sizeof(float), 1).step(0);
      }
      Q8Rows w{};
      for (int r = 0; r < R; r++) {
        w.q[r] = q + static_cast<size_t>(n0 + r) * Kp;
        w.s[r] = scales + static_cast<size_t>(n0 + r) * nb;
      }
      float out[2][kRowsAtOnce];
      for (int m = 0; m < M; m += 2) {
        const int MX = std::min(2, M - m);
        const Q8Row* x[2] = {&xs[m], &xs[m + MX - 1]};
        dots(MX, R, x, Kp, w, out);
        for (int i = 0; i < MX; i++)
          for (int r = 0; r < R; r++) store(m + i, n0 + r, out[i][r]);
      }
    }
  });
}

}  // namespace sfx
