// Attention kernels: causal grouped-query attention with the canonical sink mask (forward and backward,
// flash-style: the backward recomputes probabilities from the saved log-sum-exp), and attention of new
// tokens against a paged KV cache. Both work on blocks of up to 64 queries: the kv rows any of them keeps
// are gathered into dense buffers, and scores, probabilities and gradients are small GEMMs on the calling
// thread, one per product for all the query heads of a kv head (their rows stacked, so K and V are packed
// once per block and dK, dV are summed over the heads inside the product; the block's mask is added as the
// softmax reads each row). Work is split over (batch, kv head, query blocks) so no two tasks write the same
// output. With the
// matmul precision at bf16, the training kernels hand over to attention_bf16.cc's fused ones where those
// apply (AVX512-BF16, head sizes that are multiples of 32 up to 128). Decoding (one new token) has AVX-512
// and AVX2 kernels for head sizes up to 128 (AVX2: multiples of 8) and a portable one for the rest.
// Not here: the mask's meaning is defined in src/kernels/kernels.ts; GEMM lives in gemm.cc.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "attention_mask.h"
#include "attention_neon.h"
#include "cpu.h"
#include "kernels.h"
#include "simd_math.h"
#include "threadpool.h"

namespace sfx {

std::vector<int32_t> docPositions(int B, int T, const int32_t* docIds) {
  std::vector<int32_t> vp(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; b++) {
    const int32_t* d = docIds ? docIds + static_cast<size_t>(b) * T : nullptr;
    int P = 0;
    if (d) while (P < T && d[P] == kSharedDoc) P++;
    int s = 0;
    for (int t = 0; t < T; t++) {
      if (d && t > 0 && d[t] != d[t - 1]) s = t;
      vp[static_cast<size_t>(b) * T + t] = t < P ? t : P + t - s;
    }
  }
  return vp;
}

// Sums of n terms in one fixed order whatever the operands' addresses: 8 partial sums over the terms
// i mod 8, then a fixed tree. A compiler's vectorized reduction may peel a different number of leading
// terms for differently aligned rows, which changes the rounding; attention over the KV cache (decoding
// and cached prefill) sums with these (and softmaxRow's fixedOrder) so that a sequence's scores and
// probabilities do not depend on where its cache rows and scratch sit, on which thread runs it or on what
// else decodes beside it. Training's attention keeps the vectorized sums.
static inline float tree8(const float* p) { return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])); }

static inline float dotFixed(const float* __restrict a, const float* __restrict b, int n) {
  float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int t = 0; t < 8; t++) p[t] += a[i + t] * b[i + t];
  for (int t = 0; i < n; i++, t++) p[t] += a[i] * b[i];
  return tree8(p);
}

static inline float dotD(const float* a, const float* b, int D) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// The kv positions that at least one query of [t0, t1) keeps, ascending. Only the row's shared prefix and
// the positions from the start of t0's document on can be kept.
void blockColumns(const MaskCtx& c, int t0, int t1, std::vector<int>& cols) {
  cols.clear();
  if (!c.m.docIds && !c.m.pinned) {
    int lo = c.m.window > 0 ? std::max(0, t0 - c.m.window + 1) : 0;
    for (int j = 0; j < std::min(c.m.sinks, lo); j++) cols.push_back(j);
    for (int j = lo; j < t1; j++) cols.push_back(j);
    return;
  }
  const size_t row = static_cast<size_t>(c.b) * c.T;
  const int32_t* ids = c.m.docIds ? c.m.docIds + row : nullptr;
  const int32_t* pos = c.docPos + row;
  int prefix = 0;
  if (ids) while (prefix < t1 && ids[prefix] == kSharedDoc) prefix++;
  const int docStart = ids ? std::max(prefix, t0 - (pos[t0] - (t0 < prefix ? t0 : prefix))) : 0;
  // The block's queries in runs of one document id. Within a run positions rise with t, so of the queries
  // q >= j of a run, the first has the smallest position: the one most likely to keep j through the window.
  struct Run {
    int s, e;
    int32_t doc;
  };
  Run runs[kQBlock];
  int nRuns = 0;
  for (int t = t0; t < t1; t++) {
    if (nRuns == 0 || (ids && ids[t] != ids[t - 1])) runs[nRuns++] = {t, t + 1, ids ? ids[t] : 0};
    else runs[nRuns - 1].e = t + 1;
  }
  auto consider = [&](int j) {
    const int32_t dj = ids ? ids[j] : 0;
    const bool far = c.m.window <= 0 || pos[j] < c.m.sinks || (c.m.pinned && c.m.pinned[row + j]);
    for (int r = 0; r < nRuns; r++) {
      const int q = std::max(j, runs[r].s);
      if (q >= runs[r].e || (ids && runs[r].doc != dj && dj != kSharedDoc)) continue;
      if (far || pos[q] - pos[j] < c.m.window) {
        cols.push_back(j);
        return;
      }
    }
  };
  for (int j = 0; j < std::min(prefix, docStart); j++) consider(j);
  for (int j = docStart; j < t1; j++) consider(j);
}

// Copies rows cols[c] of one kv head ([T, KVH, D] layout from `base`) into a dense [n, D] buffer.
static void gatherRows(const float* base, const std::vector<int>& cols, size_t rowStride, int D, float* dst) {
  for (size_t c = 0; c < cols.size(); c++) std::copy(base + cols[c] * rowStride, base + cols[c] * rowStride + D, dst + c * D);
}

// Masked entries of a score row are -inf on entry, or -inf in `bias` (the row's additive mask, added first;
// null = none). Turns the row into probabilities exp(s - lse) (0 where masked) and returns lse (including
// the sink logit, if any).
SFX_CLONES static float softmaxRow(float* s, int n, bool hasSink, float sink, const float* bias = nullptr, bool fixedOrder = false) {
  if (bias) {
#pragma omp simd
    for (int j = 0; j < n; j++) s[j] += bias[j];
  }
  const float mx = maxOf(s, n, hasSink ? sink : -INFINITY);
  if (mx == -INFINITY) {
    for (int j = 0; j < n; j++) s[j] = 0.f;
    return -INFINITY;
  }
  float sum = hasSink ? expApprox(sink - mx) : 0.f;
  if (fixedOrder) {
    // the sum in a fixed order (see tree8): the row's probabilities do not depend on where it sits in memory
    float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int j = 0;
    for (; j + 8 <= n; j += 8)
      for (int t = 0; t < 8; t++) {
        float p = s[j + t] == -INFINITY ? 0.f : expApprox(s[j + t] - mx);
        s[j + t] = p;
        part[t] += p;
      }
    for (int t = 0; j < n; j++, t++) {
      float p = s[j] == -INFINITY ? 0.f : expApprox(s[j] - mx);
      s[j] = p;
      part[t] += p;
    }
    sum += tree8(part);
  } else {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
      float p = s[j] == -INFINITY ? 0.f : expApprox(s[j] - mx);
      s[j] = p;
      sum += p;
    }
  }
  float inv = 1.f / sum;
#pragma omp simd
  for (int j = 0; j < n; j++) s[j] *= inv;
  return mx + std::log(sum);
}

// P = exp(s + bias - lse) (0 where masked: -inf in the row's additive mask `bias`), written over s;
// dS = P * (dP - delta) * scale written over dP.
SFX_CLONES static void backwardRow(float* s, const float* bias, float* dp, int n, float lse, float delta, float scale) {
#pragma omp simd
  for (int j = 0; j < n; j++) {
    const float x = s[j] + bias[j];
    float p = x == -INFINITY ? 0.f : expApprox(x - lse);
    s[j] = p;
    dp[j] = p * (dp[j] - delta) * scale;
  }
}

void ColumnFacts::of(const MaskCtx& mc, const std::vector<int>& cols, int padTo) {
  const int n = static_cast<int>(cols.size());
  const size_t row = static_cast<size_t>(mc.b) * mc.T;
  const AttnMask& m = mc.m;
  pos.assign(static_cast<size_t>(padTo), INT32_MAX);
  doc.assign(static_cast<size_t>(padTo), 0);
  docPos.assign(static_cast<size_t>(padTo), 0);
  far.assign(static_cast<size_t>(padTo), 0);
  for (int c = 0; c < n; c++) {
    const size_t j = row + cols[c];
    pos[c] = cols[c];
    doc[c] = m.docIds ? m.docIds[j] : 0;
    docPos[c] = mc.docPos[j];
    far[c] = m.window <= 0 || mc.docPos[j] < m.sinks || (m.pinned && m.pinned[j]);
  }
}

// The additive mask of one query block: bias[r * n + c] = 0 where query t0 + r keeps kv position cols[c],
// -inf where it does not (MaskCtx::keep over the block's ColumnFacts).
SFX_CLONES static void blockMask(const MaskCtx& mc, int t0, int R, const std::vector<int>& cols, std::vector<float>& bias) {
  const int n = static_cast<int>(cols.size());
  bias.resize(static_cast<size_t>(R) * n);
  const size_t row = static_cast<size_t>(mc.b) * mc.T;
  const AttnMask& m = mc.m;
  static thread_local ColumnFacts facts;
  facts.of(mc, cols, n);
  const int32_t* cj = facts.pos.data();
  const int32_t* cd = facts.doc.data();
  const int32_t* cp = facts.docPos.data();
  const int32_t* cf = facts.far.data();
  const int W = m.window;
  for (int r = 0; r < R; r++) {
    const int q = t0 + r;
    const int32_t dq = m.docIds ? m.docIds[row + q] : 0, pq = mc.docPos[row + q];
    float* b = bias.data() + static_cast<size_t>(r) * n;
#pragma omp simd
    for (int c = 0; c < n; c++) {
      const int keep = (cj[c] <= q) & ((cd[c] == dq) | (cd[c] == kSharedDoc)) & ((cf[c] != 0) | (pq - cp[c] < W));
      b[c] = keep ? 0.f : -INFINITY;
    }
  }
}

// The rows of one query block for the G query heads of one kv head, stacked head by head into a dense
// [G * R, D] buffer (row g * R + r is query t0 + r of head kvh * G + g; `src` points at that block's first
// row of head kvh * G, rows H * D apart), and back.
static void gatherHeads(const float* src, int G, int R, int D, int ld, float* dst) {
  for (int g = 0; g < G; g++)
    for (int r = 0; r < R; r++) {
      const float* from = src + static_cast<size_t>(r) * ld + static_cast<size_t>(g) * D;
      std::copy(from, from + D, dst + (static_cast<size_t>(g) * R + r) * D);
    }
}
static void scatterHeads(const float* src, int G, int R, int D, int ld, float* dst) {
  for (int g = 0; g < G; g++)
    for (int r = 0; r < R; r++) {
      const float* from = src + (static_cast<size_t>(g) * R + r) * D;
      std::copy(from, from + D, dst + static_cast<size_t>(r) * ld + static_cast<size_t>(g) * D);
    }
}

// Scores of one query block for the G heads of a kv head at once: S [G * R, n] = scale * Qg K^T, without the
// block's mask (bias [R, n], 0 or -inf, the same for every head), which the softmax adds row by row. One
// product for the group, so K is packed once and the product has G * R rows.
static void groupScores(int G, int R, int n, const float* Qg, const float* Kc, int D, float scale, float* S) {
  sgemmSerial(false, true, G * R, n, D, scale, Qg, D, Kc, D, 0.f, S, n);
}

// The scratch of one thread for a forward block.
struct ForwardScratch {
  std::vector<int> cols;
  std::vector<float> Kc, Vc, S, bias, Qg, Og;
};
static thread_local ForwardScratch tForward;

void attentionForward(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                      const float* sinkLogit, float* out, float* lse) {
  if (attentionForwardBf16(sh, m, q, k, v, sinkLogit, out, lse)) return;
  const int B = sh.B, T = sh.T, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  std::vector<int32_t> ds = docPositions(B, T, m.docIds);
  const int nBlocks = (T + kQBlock - 1) / kQBlock;
  const size_t kvRow = static_cast<size_t>(KVH) * D;
  // tasks: (b, kv head, query block); each computes S = Q K^T and O = P V for the kv head's G query heads
  // together (their queries stacked), with small GEMMs
  parallelFor(B * KVH * nBlocks, [&](int task) {
    int qb = task % nBlocks, bk = task / nBlocks, b = bk / KVH, kvh = bk % KVH;
    int t0 = qb * kQBlock, t1 = std::min(T, t0 + kQBlock), R = t1 - t0;
    MaskCtx mc{m, T, ds.data(), b};
    ForwardScratch& sc = tForward;
    blockColumns(mc, t0, t1, sc.cols);
    const int n = static_cast<int>(sc.cols.size());
    const int ld = H * D;
    const size_t qo = ((static_cast<size_t>(b) * T + t0) * H + static_cast<size_t>(kvh) * G) * D;
    if (n == 0) {
      for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++) {
          const int h = kvh * G + g;
          lse[(static_cast<size_t>(b) * T + t0 + r) * H + h] = softmaxRow(nullptr, 0, sinkLogit != nullptr, sinkLogit ? sinkLogit[h] : 0.f);
          float* o = out + qo + static_cast<size_t>(r) * ld + static_cast<size_t>(g) * D;
          std::fill(o, o + D, 0.f);
        }
      return;
    }
    sc.Kc.resize(static_cast<size_t>(n) * D);
    sc.Vc.resize(static_cast<size_t>(n) * D);
    sc.S.resize(static_cast<size_t>(G) * R * n);
    sc.Qg.resize(static_cast<size_t>(G) * R * D);
    sc.Og.resize(static_cast<size_t>(G) * R * D);
    const size_t base = static_cast<size_t>(b) * T * kvRow + static_cast<size_t>(kvh) * D;
    gatherRows(k + base, sc.cols, kvRow, D, sc.Kc.data());
    gatherRows(v + base, sc.cols, kvRow, D, sc.Vc.data());
    blockMask(mc, t0, R, sc.cols, sc.bias);
    gatherHeads(q + qo, G, R, D, ld, sc.Qg.data());
    groupScores(G, R, n, sc.Qg.data(), sc.Kc.data(), D, sh.scale, sc.S.data());
    for (int g = 0; g < G; g++) {
      const int h = kvh * G + g;
      for (int r = 0; r < R; r++)
        lse[(static_cast<size_t>(b) * T + t0 + r) * H + h] =
            softmaxRow(sc.S.data() + (static_cast<size_t>(g) * R + r) * n, n, sinkLogit != nullptr, sinkLogit ? sinkLogit[h] : 0.f,
                       sc.bias.data() + static_cast<size_t>(r) * n);
    }
    sgemmSerial(false, false, G * R, D, n, 1.f, sc.S.data(), n, sc.Vc.data(), D, 0.f, sc.Og.data(), D);
    scatterHeads(sc.Og.data(), G, R, D, ld, out + qo);
  });
}

void backwardTasks(const AttnShape& sh, const AttnMask& m, float* dK, float* dV, float* dSinkLogit,
                   const BackwardBlock& block) {
  const int B = sh.B, T = sh.T, H = sh.H, KVH = sh.KVH, D = sh.D;
  std::vector<int32_t> ds = docPositions(B, T, m.docIds);
  const size_t kvRow = static_cast<size_t>(KVH) * D;
  const size_t kvSize = static_cast<size_t>(B) * T * kvRow;
  std::fill(dK, dK + kvSize, 0.f);
  std::fill(dV, dV + kvSize, 0.f);
  const int nBlocks = (T + kQBlock - 1) / kQBlock;
  // tasks: (b, kv head, share of the query blocks). With more than one share per (b, kv head), each share
  // accumulates dK/dV in a private [T, D] buffer that is added afterwards.
  int threads = poolThreads();
  int chunks = B * KVH >= threads ? 1 : std::max(1, std::min(nBlocks, (threads + B * KVH - 1) / (B * KVH)));
  int tasks = B * KVH * chunks;
  std::vector<std::vector<float>> privK(chunks > 1 ? static_cast<size_t>(tasks) : 0),
      privV(chunks > 1 ? static_cast<size_t>(tasks) : 0);
  std::vector<float> sinkPart(static_cast<size_t>(tasks) * H, 0.f);
  parallelFor(tasks, [&](int task) {
    int c = task % chunks, bk = task / chunks, b = bk / KVH, kvh = bk % KVH;
    float* dKb;
    float* dVb;
    size_t stride;
    if (chunks > 1) {
      privK[task].assign(static_cast<size_t>(T) * D, 0.f);
      privV[task].assign(static_cast<size_t>(T) * D, 0.f);
      dKb = privK[task].data();
      dVb = privV[task].data();
      stride = D;
    } else {
      dKb = dK + static_cast<size_t>(b) * T * kvRow + static_cast<size_t>(kvh) * D;
      dVb = dV + static_cast<size_t>(b) * T * kvRow + static_cast<size_t>(kvh) * D;
      stride = kvRow;
    }
    const MaskCtx mc{m, T, ds.data(), b};
    for (int qb = c; qb < nBlocks; qb += chunks)
      block(mc, kvh, qb * kQBlock, std::min(T, (qb + 1) * kQBlock), dKb, dVb, stride, sinkPart.data() + static_cast<size_t>(task) * H);
  });
  if (chunks > 1) {
    parallelFor(B * KVH, [&](int bk) {
      int b = bk / KVH, kvh = bk % KVH;
      for (int c = 0; c < chunks; c++) {
        const float* pk = privK[static_cast<size_t>(bk) * chunks + c].data();
        const float* pv = privV[static_cast<size_t>(bk) * chunks + c].data();
        for (int t = 0; t < T; t++) {
          size_t o = (static_cast<size_t>(b) * T + t) * kvRow + static_cast<size_t>(kvh) * D;
          for (int d = 0; d < D; d++) {
            dK[o + d] += pk[static_cast<size_t>(t) * D + d];
            dV[o + d] += pv[static_cast<size_t>(t) * D + d];
          }
        }
      }
    });
  }
  if (dSinkLogit) {
    for (int t = 0; t < tasks; t++)
      for (int h = 0; h < H; h++) dSinkLogit[h] += sinkPart[static_cast<size_t>(t) * H + h];
  }
}

// The scratch of one thread for a backward block.
struct BackwardScratch {
  std::vector<int> cols;
  std::vector<float> Kc, Vc, dKc, dVc, S, dP, bias, Qg, dOg, dQg;
};
static thread_local BackwardScratch tBackward;

void attentionBackward(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                       const float* sinkLogit, const float* out, const float* lse, const float* dOut, float* dQ,
                       float* dK, float* dV, float* dSinkLogit) {
  if (attentionBackwardBf16(sh, m, q, k, v, sinkLogit, out, lse, dOut, dQ, dK, dV, dSinkLogit)) return;
  const int T = sh.T, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  const size_t kvRow = static_cast<size_t>(KVH) * D;
  // Each block takes the kv head's G query heads together (queries, output gradients and scores stacked
  // head by head): five products per block instead of five per head, K and V packed once, and dK, dV
  // summed over the group's heads inside one product of depth G * R.
  backwardTasks(sh, m, dK, dV, sinkLogit ? dSinkLogit : nullptr, [&](const MaskCtx& mc, int kvh, int t0, int t1, float* dKb, float* dVb, size_t stride, float* sinkPart) {
    const int b = mc.b, R = t1 - t0, GR = G * R, ld = H * D;
    BackwardScratch& sc = tBackward;
    std::vector<int>& cols = sc.cols;
    const size_t base = static_cast<size_t>(b) * T * kvRow + static_cast<size_t>(kvh) * D;
    const size_t qo = ((static_cast<size_t>(b) * T + t0) * H + static_cast<size_t>(kvh) * G) * D;
    blockColumns(mc, t0, t1, cols);
    const int n = static_cast<int>(cols.size());
    if (n == 0) {
      for (int r = 0; r < R; r++) std::fill(dQ + qo + static_cast<size_t>(r) * ld, dQ + qo + static_cast<size_t>(r) * ld + static_cast<size_t>(G) * D, 0.f);
      return;
    }
    sc.Kc.resize(static_cast<size_t>(n) * D);
    sc.Vc.resize(static_cast<size_t>(n) * D);
    sc.dKc.assign(static_cast<size_t>(n) * D, 0.f);
    sc.dVc.assign(static_cast<size_t>(n) * D, 0.f);
    sc.S.resize(static_cast<size_t>(GR) * n);
    sc.dP.resize(static_cast<size_t>(GR) * n);
    sc.Qg.resize(static_cast<size_t>(GR) * D);
    sc.dOg.resize(static_cast<size_t>(GR) * D);
    sc.dQg.resize(static_cast<size_t>(GR) * D);
    gatherRows(k + base, cols, kvRow, D, sc.Kc.data());
    gatherRows(v + base, cols, kvRow, D, sc.Vc.data());
    blockMask(mc, t0, R, cols, sc.bias);
    gatherHeads(q + qo, G, R, D, ld, sc.Qg.data());
    gatherHeads(dOut + qo, G, R, D, ld, sc.dOg.data());
    groupScores(G, R, n, sc.Qg.data(), sc.Kc.data(), D, sh.scale, sc.S.data());
    sgemmSerial(false, true, GR, n, D, 1.f, sc.dOg.data(), D, sc.Vc.data(), D, 0.f, sc.dP.data(), n);
    for (int g = 0; g < G; g++) {
      const int h = kvh * G + g;
      for (int r = 0; r < R; r++) {
        const size_t ro = (static_cast<size_t>(b) * T + t0 + r) * H + h;
        const float l = lse[ro];
        float* sRow = sc.S.data() + (static_cast<size_t>(g) * R + r) * n;
        float* dpRow = sc.dP.data() + (static_cast<size_t>(g) * R + r) * n;
        if (std::isinf(l) && l < 0) {
          std::fill(sRow, sRow + n, 0.f);
          std::fill(dpRow, dpRow + n, 0.f);
          continue;
        }
        const float delta = dotD(dOut + ro * D, out + ro * D, D);
        if (sinkLogit) sinkPart[h] -= std::exp(sinkLogit[h] - l) * delta;
        backwardRow(sRow, sc.bias.data() + static_cast<size_t>(r) * n, dpRow, n, l, delta, sh.scale);
      }
    }
    // dQ = dS K; dK += dS^T Q; dV += P^T dO (the last two summed over the group's heads)
    sgemmSerial(false, false, GR, D, n, 1.f, sc.dP.data(), n, sc.Kc.data(), D, 0.f, sc.dQg.data(), D);
    scatterHeads(sc.dQg.data(), G, R, D, ld, dQ + qo);
    sgemmSerial(true, false, n, D, GR, 1.f, sc.dP.data(), n, sc.Qg.data(), D, 1.f, sc.dKc.data(), D);
    sgemmSerial(true, false, n, D, GR, 1.f, sc.S.data(), n, sc.dOg.data(), D, 1.f, sc.dVc.data(), D);
    for (int ci = 0; ci < n; ci++) {
      float* dk = dKb + cols[ci] * stride;
      float* dv = dVb + cols[ci] * stride;
      const float* sk = sc.dKc.data() + static_cast<size_t>(ci) * D;
      const float* sv = sc.dVc.data() + static_cast<size_t>(ci) * D;
      for (int d = 0; d < D; d++) {
        dk[d] += sk[d];
        dv[d] += sv[d];
      }
    }
  });
}

// One new token against its kept cache entries for the G query heads of one kv head (decoding): scores
// straight from the cache rows (row j at kBase + rowOff[j]), softmax per head, then one pass over the value
// rows. q and out are [G, D]; s is [G, n] scratch.
SFX_CLONES static void decodeGroup(int G, int D, int n, float scale, const float* __restrict q,
                                   const float* __restrict kBase, const float* __restrict vBase,
                                   const size_t* __restrict rowOff, const float* sink, float* __restrict s,
                                   float* __restrict out) {
  for (int j = 0; j < n; j++) {
    const float* kr = kBase + rowOff[j];
    for (int g = 0; g < G; g++) {
      s[static_cast<size_t>(g) * n + j] = dotFixed(q + static_cast<size_t>(g) * D, kr, D) * scale;
    }
  }
  for (int g = 0; g < G; g++) softmaxRow(s + static_cast<size_t>(g) * n, n, sink != nullptr, sink ? sink[g] : 0.f, nullptr, true);
  for (int i = 0; i < G * D; i++) out[i] = 0.f;
  for (int j = 0; j < n; j++) {
    const float* vr = vBase + rowOff[j];
    for (int g = 0; g < G; g++) {
      const float p = s[static_cast<size_t>(g) * n + j];
      float* og = out + static_cast<size_t>(g) * D;
#pragma omp simd
      for (int d = 0; d < D; d++) og[d] += p * vr[d];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SFX_DECODE512 1

// Lane t of the result is the sum of the 16 lanes of v[t] (a transposing reduction: 46 instructions for 16
// sums instead of 16 separate horizontal sums).
__attribute__((target("avx512f"))) static inline __m512 reduce16(const __m512* v) {
  __m512 w[8], x[4], y[2];
  for (int i = 0; i < 8; i++)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; i++)
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88), _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; i++)
    y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44), _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
  __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
  // lane 4k + m of z holds the sum of v[4m + k]
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, z);
}

// Loads / stores chunk c of a row of D floats: whole 16-float chunks, the last one masked to the row's end.
__attribute__((target("avx512f"))) static inline __m512 loadChunk(const float* row, int c, int DV, __mmask16 tail) {
  return c + 1 < DV ? _mm512_loadu_ps(row + 16 * c) : _mm512_maskz_loadu_ps(tail, row + 16 * c);
}

// out[g] += sum_j s[g][j] * v_j for GB heads at once, their outputs held in registers over one pass of rows.
// D <= 16 * DV; `tail` masks the lanes of the last chunk that lie inside D.
template <int DV, int GB>
__attribute__((target("avx512f"))) static inline void decodeValues512(int n, const float* s, int ldS, const float* vBase,
                                                                     const size_t* rowOff, float* out, int D,
                                                                     __mmask16 tail) {
  __m512 o[GB][DV];
  for (int g = 0; g < GB; g++)
    for (int c = 0; c < DV; c++) o[g][c] = _mm512_setzero_ps();
  for (int j = 0; j < n; j++) {
    const float* vr = vBase + rowOff[j];
    __m512 vv[DV];
    for (int c = 0; c < DV; c++) vv[c] = loadChunk(vr, c, DV, tail);
    for (int g = 0; g < GB; g++) {
      __m512 p = _mm512_set1_ps(s[static_cast<size_t>(g) * ldS + j]);
      for (int c = 0; c < DV; c++) o[g][c] = _mm512_fmadd_ps(p, vv[c], o[g][c]);
    }
  }
  for (int g = 0; g < GB; g++)
    for (int c = 0; c < DV; c++) {
      float* dst = out + static_cast<size_t>(g) * D + 16 * c;
      if (c + 1 < DV) _mm512_storeu_ps(dst, o[g][c]);
      else _mm512_mask_storeu_ps(dst, tail, o[g][c]);
    }
}

// Fetches `bytes` from the start of the key rows [j0, j1) into L1 and of the value rows into L2 (prefetch
// instructions only: the AVX-512 and the AVX2 decoding both use it).
static inline void prefetchRows(int j0, int j1, const float* kBase,
                                                                  const float* vBase, const size_t* rowOff,
                                                                  int bytes) {
  for (int t = j0; t < j1; t++) {
    const char* kr = reinterpret_cast<const char*>(kBase + rowOff[t]);
    const char* vr = reinterpret_cast<const char*>(vBase + rowOff[t]);
    for (int c = 0; c < bytes; c += 64) {
      _mm_prefetch(kr + c, _MM_HINT_T0);
      _mm_prefetch(vr + c, _MM_HINT_T1);
    }
  }
}

// decodeGroup for 16 * (DV - 1) < D <= 16 * DV with AVX-512 (the last 16-float chunk of a row masked):
// scores of 16 rows at a time reduced together, then the value rows passed once per few heads. The first
// head's pass brings the rows from memory: it fetches the keys 16 rows ahead (and the values, read after
// the softmax, into L2), `pfBytes` from the start of each row (the whole cache row when the other kv
// heads' parts are read next).
template <int DV>
__attribute__((target("avx512f"))) static void decodeGroup512(int G, int D, int n, float scale, const float* q,
                                                             const float* kBase, const float* vBase,
                                                             const size_t* rowOff, const float* sink, float* s,
                                                             float* out, int pfBytes) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (D - 16 * (DV - 1))) - 1u);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int g = 0; g < G; g++) {
    __m512 qv[DV];
    for (int c = 0; c < DV; c++) qv[c] = loadChunk(q + static_cast<size_t>(g) * D, c, DV, tail);
    float* sg = s + static_cast<size_t>(g) * n;
    if (g == 0) prefetchRows(0, std::min(n, 16), kBase, vBase, rowOff, pfBytes);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
      if (g == 0) prefetchRows(j + 16, std::min(n, j + 32), kBase, vBase, rowOff, pfBytes);
      __m512 acc[16];
      for (int t = 0; t < 16; t++) {
        const float* kr = kBase + rowOff[j + t];
        __m512 a = _mm512_mul_ps(qv[0], loadChunk(kr, 0, DV, tail));
        for (int c = 1; c < DV; c++) a = _mm512_fmadd_ps(qv[c], loadChunk(kr, c, DV, tail), a);
        acc[t] = a;
      }
      _mm512_storeu_ps(sg + j, _mm512_mul_ps(reduce16(acc), vscale));
    }
    for (; j < n; j++) {
      const float* kr = kBase + rowOff[j];
      __m512 a = _mm512_mul_ps(qv[0], loadChunk(kr, 0, DV, tail));
      for (int c = 1; c < DV; c++) a = _mm512_fmadd_ps(qv[c], loadChunk(kr, c, DV, tail), a);
      sg[j] = _mm512_reduce_add_ps(a) * scale;
    }
  }
  for (int g = 0; g < G; g++) softmaxRow(s + static_cast<size_t>(g) * n, n, sink != nullptr, sink ? sink[g] : 0.f, nullptr, true);
  constexpr int GB = 16 / DV;
  int g = 0;
  for (; g + GB <= G; g += GB)
    decodeValues512<DV, GB>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D, tail);
  for (; g < G; g++)
    decodeValues512<DV, 1>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D, tail);
}

// decodeGroup512 by the number of 16-float chunks of a head (1 to 8: head sizes up to 128).
using DecodeGroupFn = void (*)(int, int, int, float, const float*, const float*, const float*, const size_t*,
                               const float*, float*, float*, int);
static constexpr DecodeGroupFn kDecodeGroup512[8] = {decodeGroup512<1>, decodeGroup512<2>, decodeGroup512<3>,
                                                     decodeGroup512<4>, decodeGroup512<5>, decodeGroup512<6>,
                                                     decodeGroup512<7>, decodeGroup512<8>};

// ------------------------------------------------------------------------ decoding with AVX2 + FMA
#define SFX_DECODE_AVX2 1
#define SFX_AVX2 __attribute__((target("avx2,fma")))

// Lane t of the result is the sum of the 8 lanes of a[t].
SFX_AVX2 static inline __m256 reduce8(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// out[g] = sum_j s[g][j] * v_j over columns [0, 8 * CW) of the rows (vBase already at the columns' start)
// for GB heads at once: GB x CW accumulators held in registers over one pass of the rows.
template <int CW, int GB>
SFX_AVX2 static inline void decodeValuesAvx2(int n, const float* s, int ldS, const float* vBase, const size_t* rowOff,
                                             float* out, int D) {
  __m256 o[GB][CW];
  for (int g = 0; g < GB; g++)
    for (int c = 0; c < CW; c++) o[g][c] = _mm256_setzero_ps();
  for (int j = 0; j < n; j++) {
    const float* vr = vBase + rowOff[j];
    __m256 vv[CW];
    for (int c = 0; c < CW; c++) vv[c] = _mm256_loadu_ps(vr + 8 * c);
    for (int g = 0; g < GB; g++) {
      const __m256 p = _mm256_broadcast_ss(s + static_cast<size_t>(g) * ldS + j);
      for (int c = 0; c < CW; c++) o[g][c] = _mm256_fmadd_ps(p, vv[c], o[g][c]);
    }
  }
  for (int g = 0; g < GB; g++)
    for (int c = 0; c < CW; c++) _mm256_storeu_ps(out + static_cast<size_t>(g) * D + 8 * c, o[g][c]);
}

// The value pass for GB heads, in column groups of at most 4 chunks (GB x 4 accumulators).
template <int DV, int GB>
SFX_AVX2 static inline void decodeValueGroupsAvx2(int n, const float* s, int ldS, const float* vBase, const size_t* rowOff,
                                                  float* out, int D) {
  int c0 = 0;
  for (; c0 + 4 <= DV; c0 += 4) decodeValuesAvx2<4, GB>(n, s, ldS, vBase + 8 * c0, rowOff, out + 8 * c0, D);
  constexpr int rest = DV % 4;
  if constexpr (rest > 0) decodeValuesAvx2<rest, GB>(n, s, ldS, vBase + 8 * c0, rowOff, out + 8 * c0, D);
}

// decodeGroup for D = 8 * DV with AVX2: scores of 8 rows at a time (eight independent dot products, reduced
// together), then the value rows passed once per two heads; the first head's pass fetches the rows ahead
// as decodeGroup512 does.
template <int DV>
SFX_AVX2 static void decodeGroupAvx2(int G, int D, int n, float scale, const float* q, const float* kBase,
                                     const float* vBase, const size_t* rowOff, const float* sink, float* s, float* out,
                                     int pfBytes) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int g = 0; g < G; g++) {
    const float* qg = q + static_cast<size_t>(g) * D;
    float* sg = s + static_cast<size_t>(g) * n;
    if (g == 0) prefetchRows(0, std::min(n, 8), kBase, vBase, rowOff, pfBytes);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      if (g == 0) prefetchRows(j + 8, std::min(n, j + 16), kBase, vBase, rowOff, pfBytes);
      const float* kr[8];
      for (int t = 0; t < 8; t++) kr[t] = kBase + rowOff[j + t];
      __m256 acc[8];
      const __m256 q0 = _mm256_loadu_ps(qg);
      for (int t = 0; t < 8; t++) acc[t] = _mm256_mul_ps(q0, _mm256_loadu_ps(kr[t]));
      for (int c = 1; c < DV; c++) {
        const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
        for (int t = 0; t < 8; t++) acc[t] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kr[t] + 8 * c), acc[t]);
      }
      _mm256_storeu_ps(sg + j, _mm256_mul_ps(reduce8(acc), vscale));
    }
    for (; j < n; j++) {
      const float* kr = kBase + rowOff[j];
      __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(kr));
      for (int c = 1; c < DV; c++) a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(kr + 8 * c), a);
      const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
      sg[j] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2))) * scale;
    }
  }
  for (int g = 0; g < G; g++) softmaxRow(s + static_cast<size_t>(g) * n, n, sink != nullptr, sink ? sink[g] : 0.f, nullptr, true);
  int g = 0;
  for (; g + 2 <= G; g += 2)
    decodeValueGroupsAvx2<DV, 2>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D);
  for (; g < G; g++)
    decodeValueGroupsAvx2<DV, 1>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D);
}
#undef SFX_AVX2

// decodeGroupAvx2 by the number of 8-float chunks of a head (1 to 16: head sizes up to 128, multiples of 8).
static constexpr DecodeGroupFn kDecodeGroupAvx2[16] = {
    decodeGroupAvx2<1>,  decodeGroupAvx2<2>,  decodeGroupAvx2<3>,  decodeGroupAvx2<4>,  decodeGroupAvx2<5>,  decodeGroupAvx2<6>,
    decodeGroupAvx2<7>,  decodeGroupAvx2<8>,  decodeGroupAvx2<9>,  decodeGroupAvx2<10>, decodeGroupAvx2<11>, decodeGroupAvx2<12>,
    decodeGroupAvx2<13>, decodeGroupAvx2<14>, decodeGroupAvx2<15>, decodeGroupAvx2<16>};
#endif


// Scratch of one thread for cached attention: the gathered keys and values of one (sequence, kv head) and
// the score rows.
struct CachedScratch {
  std::vector<float> k, v, s;
  std::vector<int> cols;
  std::vector<size_t> rowOff;
  std::vector<uint8_t> pinKept;
};
static thread_local CachedScratch tCached;

void attentionCached(const CachedShape& sh, int window, int sinks, const float* q, const float* kCache,
                     const float* vCache, const int32_t* blockTable, const int32_t* seqLens, const float* sinkLogit,
                     float* out, const CachedPinned* pinned) {
  const int B = sh.B, Tq = sh.Tq, H = sh.H, KVH = sh.KVH, D = sh.D, G = H / KVH;
  const int bs = sh.blockSize;
  const bool hasSink = sinkLogit != nullptr;
  if (Tq == 1) {
    // Decoding: scores straight from the cache rows, the G query heads of a kv head together. One task per
    // sequence when there are enough of them (it reads whole cache rows, every kv head's part, in order),
    // else one per (sequence, kv head).
    const bool perSeq = B >= 4 * poolThreads();
    const int headsPerTask = perSeq ? KVH : 1;
    parallelFor(B * KVH / headsPerTask, [&](int task) {
      int b = perSeq ? task : task / KVH, kh0 = perSeq ? 0 : task % KVH;
      int e = seqLens[b] - 1;
      CachedScratch& sc = tCached;
      // the kept entries (sink slots, then the window or everything up to e) as offsets of their cache
      // rows' starts (kv head 0), a block at a time
      int lo = window > 0 ? std::max(0, e - window + 1) : 0;
      int nSinks = std::min(sinks, lo);
      // pinned entries between the sink slots and the window
      const int32_t* pin = pinned ? pinned->positions + pinned->start[b] : nullptr;
      int pin0 = 0, pin1 = pinned ? pinned->count[b] : 0;
      while (pin0 < pin1 && pin[pin0] < nSinks) pin0++;
      while (pin1 > pin0 && pin[pin1 - 1] >= lo) pin1--;
      const int n = nSinks + (pin1 - pin0) + (e + 1 - lo);
      if (sc.rowOff.size() < static_cast<size_t>(n)) sc.rowOff.resize(static_cast<size_t>(n));
      size_t* off = sc.rowOff.data();
      const size_t rowElems = static_cast<size_t>(KVH) * D;
      const int32_t* table = blockTable + static_cast<size_t>(b) * sh.maxBlocks;
      auto addRange = [&](int j, int j1) {
        while (j < j1) {
          int jb = j / bs, end = std::min(j1, (jb + 1) * bs);
          size_t row = static_cast<size_t>(table[jb]) * bs + (j - jb * bs);
          for (; j < end; j++, row++) *off++ = row * rowElems;
        }
      };
      addRange(0, nSinks);
      for (int i = pin0; i < pin1; i++) addRange(pin[i], pin[i] + 1);
      addRange(lo, e + 1);
      if (sc.s.size() < static_cast<size_t>(G) * n + 1) sc.s.resize(static_cast<size_t>(G) * n + 1);
      for (int kvh = kh0; kvh < kh0 + headsPerTask; kvh++) {
        size_t qo = (static_cast<size_t>(b) * H + static_cast<size_t>(kvh) * G) * D;
        const float* kb = kCache + static_cast<size_t>(kvh) * D;
        const float* vb = vCache + static_cast<size_t>(kvh) * D;
        const float* sink = hasSink ? sinkLogit + kvh * G : nullptr;
#ifdef SFX_DECODE512
        // the first kv head's pass fetches whole rows; later heads find their parts in cache
        const int pf = !perSeq ? D * 4 : (kvh == 0 ? KVH * D * 4 : 0);
        if (simdLevel() == Simd::Avx512 && D <= 128) {
          kDecodeGroup512[(D + 15) / 16 - 1](G, D, n, sh.scale, q + qo, kb, vb, sc.rowOff.data(), sink, sc.s.data(), out + qo, pf);
          continue;
        }
        if (simdLevel() == Simd::Avx2 && D <= 128 && D % 8 == 0) {
          kDecodeGroupAvx2[D / 8 - 1](G, D, n, sh.scale, q + qo, kb, vb, sc.rowOff.data(), sink, sc.s.data(), out + qo, pf);
          continue;
        }
#endif
#if defined(__aarch64__)
        if (simdLevel() == Simd::Neon && D % 4 == 0) {  // attention_neon.cc
          float* s = sc.s.data();
          decodeScoresNeon(G, D, n, sh.scale, q + qo, kb, sc.rowOff.data(), s);
          for (int g = 0; g < G; g++) softmaxRow(s + static_cast<size_t>(g) * n, n, hasSink, hasSink ? sink[g] : 0.f, nullptr, true);
          decodeValuesNeon(G, D, n, s, vb, sc.rowOff.data(), out + qo);
          continue;
        }
#endif
        decodeGroup(G, D, n, sh.scale, q + qo, kb, vb, sc.rowOff.data(), sink, sc.s.data(), out + qo);
      }
    });
    return;
  }
  // Several new tokens: tasks (sequence, kv head, block of up to 64 new tokens). Each gathers the cache
  // entries any of its queries keeps into dense [n, D] keys and values, then S = Q K^T, softmax, O = P V as
  // small GEMMs.
  const int qBlock = kQBlock;
  const int nQB = (Tq + qBlock - 1) / qBlock;
  parallelFor(B * KVH * nQB, [&](int task) {
    int qb = task % nQB, bk = task / nQB, b = bk / KVH, kvh = bk % KVH;
    int len = seqLens[b];
    int i0 = qb * qBlock, i1 = std::min(Tq, i0 + qBlock), R = i1 - i0;
    int eFirst = len - Tq + i0, eLast = len - Tq + i1 - 1;
    CachedScratch& sc = tCached;
    sc.cols.clear();
    int lo = window > 0 ? std::max(0, eFirst - window + 1) : 0;
    for (int j = 0; j < std::min(sinks, lo); j++) sc.cols.push_back(j);
    // pinned entries: those before the window are columns of their own; pinKept[c] marks every pinned column
    const int32_t* pin = pinned ? pinned->positions + pinned->start[b] : nullptr;
    const int nPin = pinned ? pinned->count[b] : 0;
    for (int i = 0; i < nPin; i++)
      if (pin[i] >= std::min(sinks, lo) && pin[i] < lo) sc.cols.push_back(pin[i]);
    const int windowCol = static_cast<int>(sc.cols.size());
    for (int j = lo; j <= eLast; j++) sc.cols.push_back(j);
    const int n = static_cast<int>(sc.cols.size());
    if (nPin > 0) {
      sc.pinKept.assign(static_cast<size_t>(n), 0);
      for (int c = std::min(sinks, lo); c < windowCol; c++) sc.pinKept[static_cast<size_t>(c)] = 1;
      for (int i = 0; i < nPin; i++)
        if (pin[i] >= lo && pin[i] <= eLast) sc.pinKept[static_cast<size_t>(windowCol + pin[i] - lo)] = 1;
    }
    if (sc.k.size() < static_cast<size_t>(n) * D) {
      sc.k.resize(static_cast<size_t>(n) * D);
      sc.v.resize(static_cast<size_t>(n) * D);
    }
    sc.rowOff.resize(static_cast<size_t>(n));
    for (int c = 0; c < n; c++) {
      int j = sc.cols[c];
      int blk = blockTable[static_cast<size_t>(b) * sh.maxBlocks + j / bs];
      sc.rowOff[c] = ((static_cast<size_t>(blk) * bs + j % bs) * KVH + kvh) * D;
    }
    for (int c = 0; c < n; c++) {
      size_t o = sc.rowOff[c];
      std::copy(kCache + o, kCache + o + D, sc.k.data() + static_cast<size_t>(c) * D);
      std::copy(vCache + o, vCache + o + D, sc.v.data() + static_cast<size_t>(c) * D);
    }
    if (sc.s.size() < static_cast<size_t>(R) * n + 1) sc.s.resize(static_cast<size_t>(R) * n + 1);
    float* S = sc.s.data();
    const int ld = H * D;
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
      size_t qo = ((static_cast<size_t>(b) * Tq + i0) * H + h) * D;
      if (n == 0) {
        for (int r = 0; r < R; r++) std::fill(out + qo + static_cast<size_t>(r) * ld, out + qo + static_cast<size_t>(r) * ld + D, 0.f);
        continue;
      }
      sgemmSerial(false, true, R, n, D, sh.scale, q + qo, ld, sc.k.data(), D, 0.f, S, n);
      for (int r = 0; r < R; r++) {
        int e = eFirst + r;
        float* row = S + static_cast<size_t>(r) * n;
        for (int c = 0; c < n; c++) {
          int j = sc.cols[c];
          if (j > e || !(window <= 0 || e - j < window || j < sinks || (nPin > 0 && sc.pinKept[c]))) row[c] = -INFINITY;
        }
        softmaxRow(row, n, hasSink, hasSink ? sinkLogit[h] : 0.f, nullptr, true);
      }
      sgemmSerial(false, false, R, D, n, 1.f, S, n, sc.v.data(), D, 0.f, out + qo, ld);
    }
  });
}

}  // namespace sfx
