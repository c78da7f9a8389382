// Attention kernels: causal grouped-query attention with the canonical sink mask (forward and backward,
// flash-style: the backward recomputes probabilities from the saved log-sum-exp), and attention of new
// tokens against a paged KV cache. Rows are processed one query at a time with SIMD over the head size;
// work is split over (batch, kv head, query range) so no two tasks write the same output.
// Not here: the mask's meaning is defined in src/kernels/kernels.ts; GEMM lives in gemm.cc.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "simd_math.h"
#include "threadpool.h"

namespace sfx {

// For each position, where its run of equal document ids starts.
static std::vector<int32_t> docStarts(int B, int T, const int32_t* docIds) {
  std::vector<int32_t> st(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; b++) {
    int s = 0;
    for (int t = 0; t < T; t++) {
      size_t i = static_cast<size_t>(b) * T + t;
      if (docIds && t > 0 && docIds[i] != docIds[i - 1]) s = t;
      st[i] = s;
    }
  }
  return st;
}

// The kv positions query t of batch row b keeps, ascending.
static void keptPositions(const AttnMask& m, int T, const int32_t* docStart, int b, int t, std::vector<int>& idx) {
  idx.clear();
  const size_t row = static_cast<size_t>(b) * T;
  const int W = m.window;
  if (!m.docIds && !m.pinned) {
    int lo = W > 0 ? std::max(0, t - W + 1) : 0;
    int sinkEnd = std::min(m.sinks, lo);
    for (int j = 0; j < sinkEnd; j++) idx.push_back(j);
    for (int j = lo; j <= t; j++) idx.push_back(j);
    return;
  }
  const int32_t qDoc = m.docIds ? m.docIds[row + t] : 0;
  for (int j = 0; j <= t; j++) {
    if (m.docIds && m.docIds[row + j] != qDoc) continue;
    if (W > 0 && t - j >= W && j - docStart[row + j] >= m.sinks && !(m.pinned && m.pinned[row + j])) continue;
    idx.push_back(j);
  }
}

static inline float dotD(const float* a, const float* b, int D) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// One query row: out = softmax(scale * q.k_j (+ sink)) . v_j over the kept j. Returns the row's lse.
SFX_CLONES static float rowForward(const float* q, const float* const* kRows, const float* const* vRows, int n, int D,
                                   float scale, bool hasSink, float sink, float* s, float* out) {
  float mx = hasSink ? sink : -INFINITY;
  for (int j = 0; j < n; j++) {
    float v = dotD(q, kRows[j], D) * scale;
    s[j] = v;
    mx = std::max(mx, v);
  }
  if (n == 0 && !hasSink) {
    for (int d = 0; d < D; d++) out[d] = 0.f;
    return -INFINITY;
  }
  float sum = hasSink ? expApprox(sink - mx) : 0.f;
  for (int d = 0; d < D; d++) out[d] = 0.f;
  for (int j = 0; j < n; j++) {
    float p = expApprox(s[j] - mx);
    sum += p;
    const float* v = vRows[j];
#pragma omp simd
    for (int d = 0; d < D; d++) out[d] += p * v[d];
  }
  float inv = 1.f / sum;
#pragma omp simd
  for (int d = 0; d < D; d++) out[d] *= inv;
  return mx + std::log(sum);
}

// One query row of the backward: dq (overwritten), dk_j and dv_j (accumulated). Returns delta = dOut . out.
SFX_CLONES static void rowBackward(const float* q, const float* dOut, float delta, float lse,
                                   const float* const* kRows, const float* const* vRows, float* const* dkRows,
                                   float* const* dvRows, int n, int D, float scale, float* dq) {
  for (int d = 0; d < D; d++) dq[d] = 0.f;
  for (int j = 0; j < n; j++) {
    const float* k = kRows[j];
    float sc = dotD(q, k, D) * scale;
    float dp = dotD(dOut, vRows[j], D);
    float p = expApprox(sc - lse);
    float ds = p * (dp - delta) * scale;
    float* dk = dkRows[j];
    float* dv = dvRows[j];
#pragma omp simd
    for (int d = 0; d < D; d++) {
      dq[d] += ds * k[d];
      dk[d] += ds * q[d];
      dv[d] += p * dOut[d];
    }
  }
}

void attentionForward(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                      const float* sinkLogit, float* out, float* lse) {
  const int B = sh.B, T = sh.T, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  std::vector<int32_t> ds = docStarts(B, T, m.docIds);
  // tasks: (b, kvh, query chunk); later queries cost more, so chunks are interleaved rows
  int threads = poolThreads();
  int chunks = std::max(1, std::min(T, (threads * 4 + B * KVH - 1) / (B * KVH)));
  int tasks = B * KVH * chunks;
  parallelFor(tasks, [&](int task) {
    int c = task % chunks, bk = task / chunks, b = bk / KVH, kvh = bk % KVH;
    std::vector<int> idx;
    std::vector<const float*> kRows, vRows;
    std::vector<float> s(static_cast<size_t>(T));
    for (int t = c; t < T; t += chunks) {
      keptPositions(m, T, ds.data(), b, t, idx);
      int n = static_cast<int>(idx.size());
      kRows.resize(static_cast<size_t>(n));
      vRows.resize(static_cast<size_t>(n));
      for (int j = 0; j < n; j++) {
        size_t o = ((static_cast<size_t>(b) * T + idx[j]) * KVH + kvh) * D;
        kRows[j] = k + o;
        vRows[j] = v + o;
      }
      for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        size_t qo = ((static_cast<size_t>(b) * T + t) * H + h) * D;
        lse[(static_cast<size_t>(b) * T + t) * H + h] =
            rowForward(q + qo, kRows.data(), vRows.data(), n, D, sh.scale, sinkLogit != nullptr,
                       sinkLogit ? sinkLogit[h] : 0.f, s.data(), out + qo);
      }
    }
  });
}

void attentionBackward(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                       const float* sinkLogit, const float* out, const float* lse, const float* dOut, float* dQ,
                       float* dK, float* dV, float* dSinkLogit) {
  const int B = sh.B, T = sh.T, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  std::vector<int32_t> ds = docStarts(B, T, m.docIds);
  const size_t kvSize = static_cast<size_t>(B) * T * KVH * D;
  std::fill(dK, dK + kvSize, 0.f);
  std::fill(dV, dV + kvSize, 0.f);
  // tasks: (b, kvh, query chunk). With more than one chunk per (b, kvh), each chunk accumulates dK/dV in a
  // private [T, D] buffer that is added afterwards (rows of a chunk touch many kv rows).
  int threads = poolThreads();
  int chunks = B * KVH >= threads ? 1 : std::max(1, std::min(T, (threads + B * KVH - 1) / (B * KVH)));
  int tasks = B * KVH * chunks;
  std::vector<std::vector<float>> privK(chunks > 1 ? static_cast<size_t>(tasks) : 0),
      privV(chunks > 1 ? static_cast<size_t>(tasks) : 0);
  std::vector<float> sinkPart(static_cast<size_t>(tasks) * H, 0.f);
  parallelFor(tasks, [&](int task) {
    int c = task % chunks, bk = task / chunks, b = bk / KVH, kvh = bk % KVH;
    float* dKb;
    float* dVb;
    size_t strideKV;  // between consecutive t rows of this (b, kvh)
    if (chunks > 1) {
      privK[task].assign(static_cast<size_t>(T) * D, 0.f);
      privV[task].assign(static_cast<size_t>(T) * D, 0.f);
      dKb = privK[task].data();
      dVb = privV[task].data();
      strideKV = D;
    } else {
      dKb = dK + (static_cast<size_t>(b) * T * KVH + kvh) * D;
      dVb = dV + (static_cast<size_t>(b) * T * KVH + kvh) * D;
      strideKV = static_cast<size_t>(KVH) * D;
    }
    std::vector<int> idx;
    std::vector<const float*> kRows, vRows;
    std::vector<float*> dkRows, dvRows;
    for (int t = c; t < T; t += chunks) {
      keptPositions(m, T, ds.data(), b, t, idx);
      int n = static_cast<int>(idx.size());
      kRows.resize(static_cast<size_t>(n));
      vRows.resize(static_cast<size_t>(n));
      dkRows.resize(static_cast<size_t>(n));
      dvRows.resize(static_cast<size_t>(n));
      for (int j = 0; j < n; j++) {
        size_t o = ((static_cast<size_t>(b) * T + idx[j]) * KVH + kvh) * D;
        kRows[j] = k + o;
        vRows[j] = v + o;
        dkRows[j] = dKb + idx[j] * strideKV;
        dvRows[j] = dVb + idx[j] * strideKV;
      }
      for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        size_t r = (static_cast<size_t>(b) * T + t) * H + h;
        size_t qo = r * D;
        float l = lse[r];
        if (std::isinf(l) && l < 0) {
          std::fill(dQ + qo, dQ + qo + D, 0.f);
          continue;
        }
        float delta = dotD(dOut + qo, out + qo, D);
        if (sinkLogit) sinkPart[static_cast<size_t>(task) * H + h] -= std::exp(sinkLogit[h] - l) * delta;
        rowBackward(q + qo, dOut + qo, delta, l, kRows.data(), vRows.data(), dkRows.data(), dvRows.data(), n, D,
                    sh.scale, dQ + qo);
      }
    }
  });
  if (chunks > 1) {
    parallelFor(B * KVH, [&](int bk) {
      int b = bk / KVH, kvh = bk % KVH;
      for (int c = 0; c < chunks; c++) {
        const float* pk = privK[static_cast<size_t>(bk) * chunks + c].data();
        const float* pv = privV[static_cast<size_t>(bk) * chunks + c].data();
        for (int t = 0; t < T; t++) {
          size_t o = ((static_cast<size_t>(b) * T + t) * KVH + kvh) * D;
          for (int d = 0; d < D; d++) {
            dK[o + d] += pk[static_cast<size_t>(t) * D + d];
            dV[o + d] += pv[static_cast<size_t>(t) * D + d];
          }
        }
      }
    });
  }
  if (sinkLogit && dSinkLogit) {
    for (int t = 0; t < tasks; t++)
      for (int h = 0; h < H; h++) dSinkLogit[h] += sinkPart[static_cast<size_t>(t) * H + h];
  }
}

void attentionCached(const CachedShape& sh, int window, int sinks, const float* q, const float* kCache,
                     const float* vCache, const int32_t* blockTable, const int32_t* seqLens, const float* sinkLogit,
                     float* out) {
  const int B = sh.B, Tq = sh.Tq, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  const int bs = sh.blockSize;
  int tasks = B * KVH * Tq;
  parallelFor(tasks, [&](int task) {
    int i = task % Tq, bk = task / Tq, b = bk / KVH, kvh = bk % KVH;
    int len = seqLens[b];
    int e = len - Tq + i;
    std::vector<const float*> kRows, vRows;
    kRows.reserve(static_cast<size_t>(e + 1));
    vRows.reserve(static_cast<size_t>(e + 1));
    for (int j = 0; j <= e; j++) {
      if (!(window <= 0 || e - j < window || j < sinks)) continue;
      int blk = blockTable[static_cast<size_t>(b) * sh.maxBlocks + j / bs];
      size_t o = ((static_cast<size_t>(blk) * bs + j % bs) * KVH + kvh) * D;
      kRows.push_back(kCache + o);
      vRows.push_back(vCache + o);
    }
    int n = static_cast<int>(kRows.size());
    std::vector<float> s(static_cast<size_t>(n) + 1);
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
      size_t qo = ((static_cast<size_t>(b) * Tq + i) * H + h) * D;
      rowForward(q + qo, kRows.data(), vRows.data(), n, D, sh.scale, sinkLogit != nullptr,
                 sinkLogit ? sinkLogit[h] : 0.f, s.data(), out + qo);
    }
  });
}

}  // namespace sfx
