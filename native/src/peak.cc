// The machine's measured peak: a tight loop of independent fused multiply-adds on every pool thread at the
// widest SIMD level this CPU runs. Benchmarks print GEMM figures as fractions of it. Not a kernel.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "cpu.h"
#include "kernels.h"
#include "threadpool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sfx {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float fmaLoop512(long iters) {
  __m512 a[12];
  __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  float s = 0;
  for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(a[i]);
  return s;
}
__attribute__((target("avx2,fma"))) static float fmaLoop256(long iters) {
  __m256 a[12];
  __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  alignas(32) float t[8];
  float s = 0;
  for (int i = 0; i < 12; i++) {
    _mm256_store_ps(t, a[i]);
    for (float x : t) s += x;
  }
  return s;
}
#endif

static float fmaLoopPortable(long iters) {
  float a[12][8];
  for (int i = 0; i < 12; i++)
    for (int j = 0; j < 8; j++) a[i][j] = static_cast<float>(i + j);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++)
#pragma omp simd
      for (int j = 0; j < 8; j++) a[i][j] = a[i][j] * 0.999f + 0.001f;
  float s = 0;
  for (auto& r : a)
    for (float x : r) s += x;
  return s;
}

// Flops of one fmaLoop iteration.
static double flopsPerIter() {
  switch (simdLevel()) {
    case Simd::Avx512: return 12 * 32;
    case Simd::Avx2: return 12 * 16;
    default: return 12 * 16;
  }
}

static float fmaLoop(long iters) {
#if defined(__x86_64__)
  switch (simdLevel()) {
    case Simd::Avx512: return fmaLoop512(iters);
    case Simd::Avx2: return fmaLoop256(iters);
    default: break;
  }
#endif
  return fmaLoopPortable(iters);
}

double peakGflops(double seconds, int threads) {
  if (threads < 1) threads = poolThreads();
  const long iters = 1000000;
  std::atomic<float> sink{0};
  // Each thread keeps its own best rate over short rounds and the rates are added: the figure is what
  // the cores can do, not an average under other load on the machine.
  std::vector<double> best(static_cast<size_t>(threads), 0.0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do {
    parallelFor(threads, [&](int t) {
      for (int r = 0; r < 4; r++) {
        auto t0 = std::chrono::steady_clock::now();
        sink.store(fmaLoop(iters));
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[static_cast<size_t>(t)] = std::max(best[static_cast<size_t>(t)], flopsPerIter() * iters / dt / 1e9);
      }
    });
  } while (std::chrono::steady_clock::now() < deadline);
  double total = 0;
  for (double b : best) total += b;
  return total;
}

}  // namespace sfx
