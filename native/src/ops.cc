// Fused elementwise and row-wise kernels: axpy/scale/add, bias, embedding, RMSNorm, RoPE, SwiGLU,
// softmax, log-prob gather and its backward, AdamW. Each loop body is compiled for AVX-512, AVX2 and
// portable code (SFX_CLONES) and large calls are split across the thread pool.
// Not here: GEMM (gemm.cc) and attention (attention.cc).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "simd_math.h"
#include "threadpool.h"

namespace sfx {

// Splits [0, n) into chunks of at least `grain` items across the pool.
template <class F>
static void forRange(size_t n, size_t grain, F&& body) {
  int threads = poolThreads();
  size_t tasks = std::min<size_t>(static_cast<size_t>(threads), (n + grain - 1) / std::max<size_t>(grain, 1));
  if (tasks <= 1) {
    body(size_t{0}, n);
    return;
  }
  parallelFor(static_cast<int>(tasks), [&](int t) {
    size_t a = n * t / tasks, b = n * (t + 1) / tasks;
    if (a < b) body(a, b);
  });
}

SFX_CLONES static void axpyK(size_t n, float alpha, const float* x, float* y) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}
void axpy(size_t n, float alpha, const float* x, float* y) {
  forRange(n, 1 << 16, [&](size_t a, size_t b) { axpyK(b - a, alpha, x + a, y + a); });
}

SFX_CLONES static void scaleK(size_t n, float alpha, float* x) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
}
void scale(size_t n, float alpha, float* x) {
  forRange(n, 1 << 16, [&](size_t a, size_t b) { scaleK(b - a, alpha, x + a); });
}

SFX_CLONES static void addK(size_t n, const float* a, const float* b, float* out) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
void add(size_t n, const float* a, const float* b, float* out) {
  forRange(n, 1 << 16, [&](size_t s, size_t e) { addK(e - s, a + s, b + s, out + s); });
}

SFX_CLONES static double sumSquaresK(size_t n, const float* x) {
  // float partial sums over blocks of 1024, added in double
  double total = 0;
  for (size_t s = 0; s < n; s += 1024) {
    size_t e = std::min(n, s + 1024);
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (size_t i = s; i < e; i++) acc += x[i] * x[i];
    total += acc;
  }
  return total;
}
double sumSquares(size_t n, const float* x) {
  int threads = poolThreads();
  std::vector<double> part(static_cast<size_t>(threads), 0.0);
  size_t tasks = std::min<size_t>(static_cast<size_t>(threads), (n + (1 << 16) - 1) >> 16);
  if (tasks <= 1) return sumSquaresK(n, x);
  parallelFor(static_cast<int>(tasks), [&](int t) {
    size_t a = n * t / tasks, b = n * (t + 1) / tasks;
    part[static_cast<size_t>(t)] = sumSquaresK(b - a, x + a);
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}

SFX_CLONES static void addBiasK(int rows, int C, float* x, const float* bias) {
  for (int r = 0; r < rows; r++) {
    float* xr = x + static_cast<size_t>(r) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) xr[c] += bias[c];
  }
}
void addBias(int N, int C, float* x, const float* bias) {
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 65536 / std::max(C, 1)), [&](size_t a, size_t b) {
    addBiasK(static_cast<int>(b - a), C, x + a * C, bias);
  });
}

void biasBackward(int N, int C, const float* dY, float* dBias) {
  // column sums: split columns across tasks so no two tasks write the same output
  int threads = poolThreads();
  int tasks = (static_cast<size_t>(N) * C < 65536) ? 1 : std::min(threads, std::max(1, C / 16));
  parallelFor(tasks, [&](int t) {
    int c0 = static_cast<int>(static_cast<long>(C) * t / tasks), c1 = static_cast<int>(static_cast<long>(C) * (t + 1) / tasks);
    std::vector<float> acc(static_cast<size_t>(c1 - c0), 0.f);
    for (int r = 0; r < N; r += 256) {
      std::vector<float> blk(static_cast<size_t>(c1 - c0), 0.f);
      int r1 = std::min(N, r + 256);
      for (int rr = r; rr < r1; rr++) {
        const float* d = dY + static_cast<size_t>(rr) * C + c0;
        for (int c = 0; c < c1 - c0; c++) blk[c] += d[c];
      }
      for (int c = 0; c < c1 - c0; c++) acc[c] += blk[c];
    }
    for (int c = c0; c < c1; c++) dBias[c] += acc[c - c0];
  });
}

void embeddingForward(int N, int C, const int32_t* ids, const float* table, float* out) {
  forRange(static_cast<size_t>(N), 64, [&](size_t a, size_t b) {
    for (size_t n = a; n < b; n++)
      std::copy(table + static_cast<size_t>(ids[n]) * C, table + static_cast<size_t>(ids[n] + 1) * C, out + n * C);
  });
}

void embeddingBackward(int N, int C, const int32_t* ids, const float* dOut, float* dTable) {
  // rows with the same id must not be written concurrently: split the channels instead of the rows
  int threads = poolThreads();
  int tasks = (static_cast<size_t>(N) * C < 65536) ? 1 : std::min(threads, std::max(1, C / 16));
  parallelFor(tasks, [&](int t) {
    int c0 = static_cast<int>(static_cast<long>(C) * t / tasks), c1 = static_cast<int>(static_cast<long>(C) * (t + 1) / tasks);
    for (int n = 0; n < N; n++) {
      float* d = dTable + static_cast<size_t>(ids[n]) * C;
      const float* g = dOut + static_cast<size_t>(n) * C;
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  });
}

SFX_CLONES static void rmsnormRows(int r0, int r1, int C, float eps, const float* x, const float* w, float* out,
                                   float* rstd) {
  for (int r = r0; r < r1; r++) {
    const float* xr = x + static_cast<size_t>(r) * C;
    float* o = out + static_cast<size_t>(r) * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
    float rs = 1.f / std::sqrt(ss / C + eps);
    rstd[r] = rs;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = xr[c] * rs * w[c];
  }
}
void rmsnormForward(int N, int C, float eps, const float* x, const float* w, float* out, float* rstd) {
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 16384 / std::max(C, 1)), [&](size_t a, size_t b) {
    rmsnormRows(static_cast<int>(a), static_cast<int>(b), C, eps, x, w, out, rstd);
  });
}

SFX_CLONES static void rmsnormBackRows(int r0, int r1, int C, const float* dOut, const float* x, const float* w,
                                       const float* rstd, float* dX, float* dW) {
  for (int r = r0; r < r1; r++) {
    size_t o = static_cast<size_t>(r) * C;
    float rs = rstd[r];
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++) dot += dOut[o + c] * w[c] * x[o + c];
    float k = rs * rs * rs * dot / C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      dW[c] += dOut[o + c] * x[o + c] * rs;
      dX[o + c] = rs * w[c] * dOut[o + c] - k * x[o + c];
    }
  }
}
void rmsnormBackward(int N, int C, const float* dOut, const float* x, const float* w, const float* rstd, float* dX,
                     float* dW) {
  int threads = poolThreads();
  int tasks = (static_cast<size_t>(N) * C < 32768) ? 1 : std::min(threads, N);
  std::vector<std::vector<float>> part(static_cast<size_t>(tasks), std::vector<float>(static_cast<size_t>(C), 0.f));
  parallelFor(tasks, [&](int t) {
    int a = static_cast<int>(static_cast<long>(N) * t / tasks), b = static_cast<int>(static_cast<long>(N) * (t + 1) / tasks);
    rmsnormBackRows(a, b, C, dOut, x, w, rstd, dX, part[static_cast<size_t>(t)].data());
  });
  for (auto& p : part)
    for (int c = 0; c < C; c++) dW[c] += p[c];
}

SFX_CLONES static void ropeRows(int r0, int r1, int H, int D, const int32_t* pos, const float* cosT,
                                const float* sinT, float* x, float sign) {
  int half = D / 2;
  for (int r = r0; r < r1; r++) {
    const float* c = cosT + static_cast<size_t>(pos[r]) * half;
    const float* s = sinT + static_cast<size_t>(pos[r]) * half;
    for (int h = 0; h < H; h++) {
      float* v = x + (static_cast<size_t>(r) * H + h) * D;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        float x1 = v[i], x2 = v[i + half], si = sign * s[i];
        v[i] = x1 * c[i] - x2 * si;
        v[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}
void rope(int N, int H, int D, const int32_t* pos, const float* cosT, const float* sinT, float* x, bool backward) {
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 16384 / std::max(H * D, 1)), [&](size_t a, size_t b) {
    ropeRows(static_cast<int>(a), static_cast<int>(b), H, D, pos, cosT, sinT, x, backward ? -1.f : 1.f);
  });
}

SFX_CLONES static void swigluK(size_t n, const float* g, const float* u, float* out) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = g[i] / (1.f + expApprox(-g[i])) * u[i];
}
void swigluForward(size_t n, const float* gate, const float* up, float* out) {
  forRange(n, 1 << 15, [&](size_t a, size_t b) { swigluK(b - a, gate + a, up + a, out + a); });
}

SFX_CLONES static void swigluBackK(size_t n, const float* dOut, const float* g, const float* u, float* dG, float* dU) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    float gi = g[i], ui = u[i], d = dOut[i];
    float sig = 1.f / (1.f + expApprox(-gi));
    dU[i] = d * gi * sig;
    dG[i] = d * ui * sig * (1.f + gi * (1.f - sig));
  }
}
void swigluBackward(size_t n, const float* dOut, const float* gate, const float* up, float* dGate, float* dUp) {
  forRange(n, 1 << 15, [&](size_t a, size_t b) { swigluBackK(b - a, dOut + a, gate + a, up + a, dGate + a, dUp + a); });
}

SFX_CLONES static float rowMax(int V, const float* x) { return maxOf(x, V, -INFINITY); }

// sum_j exp(x_j * invT - mx), accumulated in float blocks, added in double.
SFX_CLONES static double rowSumExp(int V, const float* x, float invT, float mx) {
  double total = 0;
  for (int s = 0; s < V; s += 2048) {
    int e = std::min(V, s + 2048);
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int j = s; j < e; j++) acc += expApprox(x[j] * invT - mx);
    total += acc;
  }
  return total;
}

SFX_CLONES static void softmaxRowsK(int r0, int r1, int V, float invT, const float* x, float* out, bool log) {
  for (int r = r0; r < r1; r++) {
    const float* xr = x + static_cast<size_t>(r) * V;
    float* o = out + static_cast<size_t>(r) * V;
    float mx = rowMax(V, xr) * invT;
    double sum = rowSumExp(V, xr, invT, mx);
    if (log) {
      float lse = mx + static_cast<float>(std::log(sum));
#pragma omp simd
      for (int j = 0; j < V; j++) o[j] = xr[j] * invT - lse;
    } else {
      float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
      for (int j = 0; j < V; j++) o[j] = expApprox(xr[j] * invT - mx) * inv;
    }
  }
}
void softmaxRows(int N, int V, float temperature, const float* x, float* out, bool log) {
  float invT = 1.f / temperature;
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 32768 / std::max(V, 1)), [&](size_t a, size_t b) {
    softmaxRowsK(static_cast<int>(a), static_cast<int>(b), V, invT, x, out, log);
  });
}

void logprobsForward(int N, int V, const float* logits, const int32_t* targets, float* logprob, float* lse) {
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 32768 / std::max(V, 1)), [&](size_t a, size_t b) {
    for (size_t n = a; n < b; n++) {
      const float* x = logits + n * V;
      float mx = rowMax(V, x);
      double l = mx + std::log(rowSumExp(V, x, 1.f, mx));
      lse[n] = static_cast<float>(l);
      int t = targets[n];
      logprob[n] = t >= 0 ? static_cast<float>(x[t] - l) : 0.f;
    }
  });
}

SFX_CLONES static void logprobsBackRow(int V, const float* x, float l, float g, float* d) {
#pragma omp simd
  for (int j = 0; j < V; j++) d[j] = -g * expApprox(x[j] - l);
}
void logprobsBackward(int N, int V, const float* logits, const int32_t* targets, const float* lse,
                      const float* dLogprob, float* dLogits) {
  forRange(static_cast<size_t>(N), std::max<size_t>(1, 32768 / std::max(V, 1)), [&](size_t a, size_t b) {
    for (size_t n = a; n < b; n++) {
      int t = targets[n];
      float g = t >= 0 ? dLogprob[n] : 0.f;
      float* d = dLogits + n * V;
      if (g == 0.f) {
        std::fill(d, d + V, 0.f);
        continue;
      }
      logprobsBackRow(V, logits + n * V, lse[n], g, d);
      d[t] += g;
    }
  });
}

SFX_CLONES static void adamwK(size_t n, float* p, const float* g, float* m, float* v, float lr, float b1, float b2,
                              float eps, float wd, float invBc1, float invSqrtBc2, float gs) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.f - b1) * gi;
    float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float upd = (mi * invBc1) / (std::sqrt(vi) * invSqrtBc2 + eps);
    p[i] -= lr * (wd * p[i] + upd);
  }
}
void adamwUpdate(size_t n, float* p, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float wd, int step, float gradScale) {
  double bc1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  double bc2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  float invBc1 = static_cast<float>(1.0 / bc1), invSqrtBc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  forRange(n, 1 << 15, [&](size_t a, size_t b) {
    adamwK(b - a, p + a, g + a, m + a, v + a, lr, beta1, beta2, eps, wd, invBc1, invSqrtBc2, gradScale);
  });
}

}  // namespace sfx
