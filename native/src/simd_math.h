// Branch-free float math that the compiler vectorizes inside SIMD loops (exp, sigmoid), and the
// target_clones attribute used by loop kernels to get AVX-512 / AVX2 / portable versions chosen at load.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SFX_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define SFX_CLONES
#endif

namespace sfx {

// exp(x) for float, relative error ~2e-7 over the normal range; x <= -87.3 gives ~0, x >= 88.3 saturates.
static inline float expApprox(float x) {
  x = x < -87.33f ? -87.33f : (x > 88.3f ? 88.3f : x);
  float t = x * 1.44269504088896341f;
  // round to nearest via the 1.5 * 2^23 trick (vectorizes without SSE4.1)
  float n = (t + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = static_cast<int32_t>(n) + 127;
  int32_t bits = e << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(float));
  return p * scale;
}

// max(init, x[0..n)) for finite or infinite x (no NaN). Sixteen running maxima, one per lane, so the
// compiler vectorizes it: a plain `m = std::max(m, x[j])` loop is a chain of scalar max instructions.
static inline float maxOf(const float* x, int n, float init) {
  float lane[16];
  for (int l = 0; l < 16; l++) lane[l] = init;
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; l++) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  for (; j < n; j++) lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  float m = lane[0];
  for (int l = 1; l < 16; l++) m = lane[l] > m ? lane[l] : m;
  return m;
}

}  // namespace sfx
