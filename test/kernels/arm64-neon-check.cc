// A check of the native kernels built for AArch64 (the NEON ones), run under qemu-user by
// test/kernels/arm64-build.test.ts: sgemm, sgemmSerial, sgemmPacked, sgemv and gemmW16 against a plain
// loop in double precision, over shapes that reach every edge of the 8 x 12 micro-kernel (1 to 9 rows,
// columns around multiples of 12, depth past one cache block), all transposes, alpha, beta 0 / 1 / other
// and row strides; and decoding attention (attentionCached, one new token) over a paged cache. Prints one
// JSON line {"simd", "products", "worst"} and exits 1 when a result is off. Not the reference comparison
// of the addon (test/kernels/native.test.ts), which needs an arm64 Node.
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

// y = alpha op(A) x + beta y, A [M, N] with row stride lda (trans: y = alpha A^T x + beta y).
void checkSgemv(int M, int N, bool trans, float alpha, float beta) {
  const int lda = N + 3, ny = trans ? N : M, nx = trans ? M : N;
  const auto A = randoms(static_cast<size_t>(M) * lda), x = randoms(static_cast<size_t>(nx));
  const auto y0 = randoms(static_cast<size_t>(ny));
  auto y = y0;
  sfx::sgemv(trans, M, N, alpha, A.data(), lda, x.data(), beta, y.data());
  expectProduct("sgemv", ny, 1, nx, alpha, beta, y0, y, 1,
                [&](int i, int p) { return trans ? A[static_cast<size_t>(p) * lda + i] : A[static_cast<size_t>(i) * lda + p]; },
                [&](int p, int) { return x[p]; });
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

// attentionCached decoding one token per sequence (the NEON decode for head sizes that are multiples of 4,
// the portable loop for the rest) against a plain loop: G query heads per kv head, a paged cache of 7-row
// blocks in shuffled order, window, sink slots and sink logits.
void checkDecode(int H, int KVH, int D, std::vector<int32_t> lens, int window, int sinks, bool withSink) {
  const int B = static_cast<int>(lens.size()), bs = 7, G = H / KVH;
  int maxLen = 0;
  for (int l : lens) maxLen = l > maxLen ? l : maxLen;
  const int maxBlocks = (maxLen + bs - 1) / bs, nBlocks = B * maxBlocks + 1;
  const auto kC = randoms(static_cast<size_t>(nBlocks) * bs * KVH * D), vC = randoms(static_cast<size_t>(nBlocks) * bs * KVH * D);
  std::vector<int32_t> table(static_cast<size_t>(B) * maxBlocks);
  for (size_t i = 0; i < table.size(); i++) table[i] = static_cast<int32_t>((i * 5 + 2) % nBlocks);
  const auto q = randoms(static_cast<size_t>(B) * H * D), sink = randoms(static_cast<size_t>(H));
  std::vector<float> out(q.size(), NAN);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  sfx::CachedShape sh{B, 1, H, KVH, D, scale, bs, maxBlocks};
  sfx::attentionCached(sh, window, sinks, q.data(), kC.data(), vC.data(), table.data(), lens.data(),
                       withSink ? sink.data() : nullptr, out.data());
  double err = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int e = lens[b] - 1, kvh = h / G;
      std::vector<size_t> rows;
      std::vector<double> sc;
      for (int j = 0; j <= e; j++) {
        if (!(window <= 0 || e - j < window || j < sinks)) continue;
        const size_t off = ((static_cast<size_t>(table[b * maxBlocks + j / bs]) * bs + j % bs) * KVH + kvh) * D;
        double t = 0;
        for (int d = 0; d < D; d++) t += static_cast<double>(q[(static_cast<size_t>(b) * H + h) * D + d]) * kC[off + d];
        rows.push_back(off);
        sc.push_back(t * scale);
      }
      double mx = withSink ? sink[h] : -INFINITY;
      for (double x : sc) mx = std::fmax(mx, x);
      double z = withSink ? std::exp(sink[h] - mx) : 0;
      for (double x : sc) z += std::exp(x - mx);
      for (int d = 0; d < D; d++) {
        double t = 0;
        for (size_t j = 0; j < sc.size(); j++) t += std::exp(sc[j] - mx) / z * vC[rows[j] + d];
        err = std::fmax(err, std::fabs(t - out[(static_cast<size_t>(b) * H + h) * D + d]));
      }
    }
  products++;
  if (err > worst) worst = err;
  if (!(err <= 5e-5)) {
    failures++;
    std::fprintf(stderr, "attentionCached H=%d KVH=%d D=%d window=%d sinks=%d: error %g\n", H, KVH, D, window, sinks, err);
  }
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
  for (bool trans : {false, true}) {
    checkSgemv(300, 77, trans, 0.8f, 0.f);     // one task
    checkSgemv(1000, 101, trans, 1.f, 0.5f);  // split over the pool
  }
  for (int M : {1, 4, 7, 40})
    for (int N : {12, 37}) checkPacked(M, N, 400, 0.9f, M == 7 ? 0.5f : 0.f);
  for (int M : {1, 6, 33})
    for (bool transW : {true, false}) checkW16(M, 45, 70, transW, M == 6 ? 1.f : 0.f);
  checkDecode(8, 2, 64, {1, 17, 40}, 0, 0, false);
  checkDecode(6, 2, 64, {33, 16, 50}, 9, 1, true);
  checkDecode(6, 2, 128, {48, 3, 21}, 0, 0, true);
  checkDecode(6, 3, 24, {30, 5, 9}, 7, 2, true);
  checkDecode(5, 1, 100, {20, 9}, 6, 2, true);
  checkDecode(3, 3, 3, {12, 2, 25}, 4, 0, true);
  checkDecode(8, 2, 64, {1, 17, 40, 5, 33, 16, 50, 2, 9, 64, 31, 8}, 0, 0, true);
  std::printf("{\"simd\":\"%s\",\"products\":%d,\"worst\":%g}\n", sfx::simdName(sfx::simdLevel()), products, worst);
  return failures == 0 ? 0 : 1;
}
