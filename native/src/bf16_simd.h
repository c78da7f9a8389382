// AVX512-BF16 helpers shared by the bf16 products (gemm_bf16.cc) and the fused bf16 attention
// (attention_bf16.cc): loading, rounding to bfloat16 (to nearest even), pairing and transposing. Compiled
// for AVX512-BF16 whatever the file's target; callers run them only where bf16Unit() is not None.
#pragma once
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define SFX_HAS_BF16_SIMD 1
#include <immintrin.h>

#define SFX_BF16_SIMD __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace sfx::bf16simd {

// n (0..16) floats from p, zero past them, times alpha.
SFX_BF16_SIMD static inline __m512 load16(const float* p, int n, float alpha) {
  const __mmask16 m = n >= 16 ? 0xffff : (n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1));
  const __m512 v = _mm512_maskz_loadu_ps(m, p);
  return alpha == 1.f ? v : _mm512_mul_ps(v, _mm512_set1_ps(alpha));
}

// 32 bf16: lo's 16 then hi's 16.
SFX_BF16_SIMD static inline __m512i toBf16(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// From [a0..a15, b0..b15] to the pairs [a0 b0 a1 b1 ...].
SFX_BF16_SIMD static inline __m512i interleavePairs(__m512i v) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, v);
}

// Transposes a 16 x 16 matrix of 32-bit elements held as 16 rows.
SFX_BF16_SIMD static inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

}  // namespace sfx::bf16simd
#endif
