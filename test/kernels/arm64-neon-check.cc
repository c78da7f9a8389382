// A check of the native GEMMs built for AArch64 (the NEON kernels), run under qemu-user by
// test/kernels/arm64-build.test.ts: sgemm, sgemmSerial, sgemmPacked and gemmW16 against a plain loop in
// double precision, over shapes that reach every edge of the 8 x 12 micro-kernel (1 to 9 rows, columns around
// multiples of 12, depth past one cache block), all transposes, alpha, beta 0 / 1 / other and row strides.
// Prints one JSON line {"simd", "products", "worst"} and exits 1 when a product is off. Not the reference
// comparison of the addon (test/kernels/native.test.ts), which needs an arm64 Node.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../native/src/cpu.h"
#include "../../native/src/kernels.h"

namespace {

uint32_t seed = 12345;
float rnd() {
  seed = seed * 1664525u + 1013904223u;
  return static_cast<float>(seed >> 8) / 8388608.f - 1.f;  // [-1, 1)
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double worst = 0;
int products = 0, failures = 0;

// Compares C (M x N, row stride ldc) with alpha * op(A) op(B) + beta * C0, where at(i, p) and bt(p, j) read op(A), op(B).
template <class AT, class BT>
void expectProduct(const char* what, int M, int N, int K, float alpha, float beta, const std::vector<float>& C0,
                   const std::vector<float>& C, int ldc, AT at, BT bt) {
  double err = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++) {
      const size_t o = static_cast<size_t>(i) * ldc + j;
      double want = C0[o];  // columns past N must be untouched
      if (j < N) {
        double s = 0;
        for (int p = 0; p < K; p++) s += static_cast<double>(at(i, p)) * bt(p, j);
        want = alpha * s + (beta == 0.f ? 0.0 : beta * static_cast<double>(C0[o]));
      }
      err = std::fmax(err, std::fabs(want - C[o]) / (1.0 + std::fabs(want)));
    }
  products++;
  if (err > worst) worst = err;
  if (err > 5e-5) {
    failures++;
    std::fprintf(stderr, "%s M=%d N=%d K=%d alpha=%g beta=%g: relative error %g\n", what, M, N, K, alpha, beta, err);
  }
}

std::vector<float> randoms(size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = rnd();
  return v;
}

void checkSgemm(int M, int N, int K, bool ta, bool tb, float alpha, float beta, bool serial) {
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
  const auto A = randoms(static_cast<size_t>(ta ? K : M) * lda), B = randoms(static_cast<size_t>(tb ? N : K) * ldb);
  const auto C0 = randoms(static_cast<size_t>(M) * ldc);
  auto C = C0;
  (serial ? sfx::sgemmSerial : sfx::sgemm)(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  expectProduct(serial ? "sgemmSerial" : "sgemm", M, N, K, alpha, beta, C0, C, ldc,
                [&](int i, int p) { return ta ? A[static_cast<size_t>(p) * lda + i] : A[static_cast<size_t>(i) * lda + p]; },
                [&](int p, int j) { return tb ? B[static_cast<size_t>(j) * ldb + p] : B[static_cast<size_t>(p) * ldb + j]; });
}

void checkPacked(int M, int N, int K, float alpha, float beta) {
  const int lda = K + 1, ldw = K + 2, ldc = N;
  const auto A = randoms(static_cast<size_t>(M) * lda), W = randoms(static_cast<size_t>(N) * ldw);
  std::vector<float> Wp(sfx::packedWeightSize(N, K));
  sfx::packWeight(N, K, W.data(), ldw, Wp.data());
  const auto C0 = randoms(static_cast<size_t>(M) * ldc);
  auto C = C0;
  sfx::sgemmPacked(M, N, K, alpha, A.data(), lda, Wp.data(), beta, C.data(), ldc);
  expectProduct("sgemmPacked", M, N, K, alpha, beta, C0, C, ldc,
                [&](int i, int p) { return A[static_cast<size_t>(i) * lda + p]; },
                [&](int p, int j) { return W[static_cast<size_t>(j) * ldw + p]; });
}

void checkW16(int M, int N, int K, bool transW, float beta) {
  const int lda = K, ldw = transW ? K : N, ldc = N;
  const auto A = randoms(static_cast<size_t>(M) * lda);
  std::vector<uint16_t> W(static_cast<size_t>(transW ? N : K) * ldw);
  for (auto& w : W) {
    float f = rnd();
    uint32_t u;
    std::memcpy(&u, &f, 4);
    w = static_cast<uint16_t>(u >> 16);
  }
  const auto C0 = randoms(static_cast<size_t>(M) * ldc);
  auto C = C0;
  sfx::gemmW16(transW, M, N, K, 1.f, A.data(), lda, W.data(), ldw, beta, C.data(), ldc);
  expectProduct("gemmW16", M, N, K, 1.f, beta, C0, C, ldc, [&](int i, int p) { return A[static_cast<size_t>(i) * lda + p]; },
                [&](int p, int j) {
                  return bf16ToFloat(transW ? W[static_cast<size_t>(j) * ldw + p] : W[static_cast<size_t>(p) * ldw + j]);
                });
}

}  // namespace

int main() {
  for (int M : {1, 3, 4, 5, 8, 9, 17})
    for (int N : {1, 11, 12, 13, 25})
      for (int K : {1, 7, 33})
        for (int t = 0; t < 4; t++) checkSgemm(M, N, K, t & 1, t & 2, 0.7f, t == 3 ? 0.5f : (t & 1 ? 1.f : 0.f), M == 9);
  // depth past one cache block, many tiles, every task layout of the driver (rows split, B packed once)
  for (int t = 0; t < 4; t++) checkSgemm(70, 100, 400, t & 1, t & 2, 1.f, 0.f, false);
  for (int t = 0; t < 4; t++) checkSgemm(200, 530, 300, t & 1, t & 2, 0.5f, 1.f, false);
  for (int M : {1, 4, 7, 40})
    for (int N : {12, 37}) checkPacked(M, N, 400, 0.9f, M == 7 ? 0.5f : 0.f);
  for (int M : {1, 6, 33})
    for (bool transW : {true, false}) checkW16(M, 45, 70, transW, M == 6 ? 1.f : 0.f);
  std::printf("{\"simd\":\"%s\",\"products\":%d,\"worst\":%g}\n", sfx::simdName(sfx::simdLevel()), products, worst);
  return failures == 0 ? 0 : 1;
}
