// The training attention kernels (forward and backward) with bf16 products on AVX512-BF16, fused: for each
// block of up to 64 queries of one kv head, the kept kv rows are gathered once, straight into the packed
// bf16 layouts the dot-product instruction reads, and shared by the kv head's query heads; the mask is
// evaluated once per block as bit masks; the scores, softmax and gradients are computed in those layouts
// with no intermediate fp32 product through a general GEMM. attentionForward and attentionBackward
// (attention.cc) come here when the matmul precision is bf16 and the head size is a multiple of 32 (up to
// 128). The results are those of attention.cc's bf16 path (the same operands rounded to bf16, the same fp32
// accumulation) up to the order of the sums, the exp (a polynomial good to 3e-6, against expApprox's 2e-7)
// and the softmax's normalization, which is applied to the output instead of the probabilities.
//
// Layouts (bf16 words; a "pair" is two bf16 values read together by vdpbf16ps and multiplied with the pair
// at the same place of the other operand):
//   rows by d pairs   X[r][d]: a row-major bf16 matrix; pairs run along d. Queries and output gradients
//                     when d is contracted (scores, dP).
//   key tiles         [tile of 16 keys][d pair][16 keys x 2]: lanes over keys, pairs along d. Keys and
//                     values when d is contracted.
//   rows in pairs     [row pair][d][2]: lanes over d, pairs along rows. Keys and values when keys are
//                     contracted (O = P V, dQ = dS K); queries and output gradients when queries are (dK,
//                     dV).
//   pairs of rows     [row pair][key][2]: P and dS transposed for dK = dS^T Q and dV = P^T dO.
// Not here: the mask's meaning (src/kernels/kernels.ts), the fp32 kernels and the block's columns
// (attention.cc), bf16 GEMM (gemm_bf16.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention_mask.h"
#include "bf16_simd.h"
#include "kernels.h"
#include "threadpool.h"


namespace sfx {

#ifdef SFX_HAS_BF16_SIMD
// Everything up to the entry points is compiled for AVX512-BF16 (lambdas included); the entry points check
// the unit before calling into it.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
namespace {

using namespace bf16simd;

// 16 pairs (lo[i], hi[i]) as 32-bit words.
inline __m512i pairUp(__m512 lo, __m512 hi) { return interleavePairs(toBf16(lo, hi)); }

// exp(x) on 16 lanes for x <= 88, 0 far below -87: 2^n 2^f with x log2(e) = n + f, n an integer and |f| <=
// 1/2, 2^f by a degree-4 polynomial (least squares in relative error: at most 3.1e-6, far below the 2^-9 of
// the bf16 rounding every probability gets here), 2^n by vscalefps.
inline __m512 exp16(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33f)), _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(9.600395517e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.591689383e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402371846e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931219948e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// The one product of this file: acc[r][c] += sum over pairs p of a's pair (row r, p) times b's pair (p, lane
// of chunk c), for RG rows and NC chunks of 16 lanes. a's pair of row r is the 32-bit word a[r * aRow + p *
// aPair]; b's chunk c at pair p is the 32 words from b + p * bPair + c * bChunk.
template <int NC, int RG>
inline void pairProduct(const uint32_t* a, size_t aRow, size_t aPair, int nPairs, const uint16_t* b,
                                        size_t bPair, size_t bChunk, __m512 (&acc)[RG][NC]) {
  for (int p = 0; p < nPairs; p++) {
    __m512bh v[NC];
    for (int c = 0; c < NC; c++) v[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * bPair + c * bChunk));
    for (int r = 0; r < RG; r++) {
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r * aRow + p * aPair])));
      for (int c = 0; c < NC; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x, v[c]);
    }
  }
}

// Row i of a [rows, D] matrix: base + idx[i] * stride (idx null: i * stride).
struct Rows {
  const float* base;
  const int* idx;
  size_t stride;
  const float* operator[](int i) const { return base + static_cast<size_t>(idx ? idx[i] : i) * stride; }
};

// Rows by d pairs: rowsPad rows of D bf16 (alpha X), zero past `rows`.
void packRowsByD(const Rows& x, int rows, int rowsPad, int D, float alpha, uint16_t* dst) {
  for (int r = 0; r < rowsPad; r++)
    for (int d = 0; d < D; d += 32) {
      const __m512i v = r < rows ? toBf16(load16(x[r] + d, 16, alpha), load16(x[r] + d + 16, 16, alpha)) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + static_cast<size_t>(r) * D + d, v);
    }
}

// Key tiles: the rows as tiles of 16 (zero past `rows`), each [D / 2 pairs][16 rows x 2].
void packKeyTiles(const Rows& x, int rows, int nTiles, int D, uint16_t* dst) {
  for (int t = 0; t < nTiles; t++)
    for (int d = 0; d < D; d += 32) {
      __m512i v[16];
      for (int j = 0; j < 16; j++) {
        const int r = 16 * t + j;
        v[j] = r < rows ? toBf16(load16(x[r] + d, 16, 1.f), load16(x[r] + d + 16, 16, 1.f)) : _mm512_setzero_si512();
      }
      transpose16(v);  // v[p] holds pair d / 2 + p of the 16 rows
      uint16_t* tile = dst + static_cast<size_t>(t) * D * 16;
      for (int p = 0; p < 16; p++) _mm512_storeu_si512(tile + static_cast<size_t>(d / 2 + p) * 32, v[p]);
    }
}

// Rows in pairs: [rowsPad / 2][D][2], zero past `rows` (rowsPad even).
void packRowPairs(const Rows& x, int rows, int rowsPad, int D, uint16_t* dst) {
  for (int i = 0; i < rowsPad / 2; i++)
    for (int d = 0; d < D; d += 16) {
      const __m512 lo = 2 * i < rows ? load16(x[2 * i] + d, 16, 1.f) : _mm512_setzero_ps();
      const __m512 hi = 2 * i + 1 < rows ? load16(x[2 * i + 1] + d, 16, 1.f) : _mm512_setzero_ps();
      _mm512_storeu_si512(dst + (static_cast<size_t>(i) * D + d) * 2, pairUp(lo, hi));
    }
}

// One query block's mask as bits: bit c of bits[r * nTiles + t] is set where query t0 + r keeps cols[16 t + c]
// (MaskCtx::keep over the block's ColumnFacts); rows at or past R and columns past cols keep nothing.
void maskBits(const MaskCtx& mc, int t0, int R, int rowsPad, const std::vector<int>& cols, int nTiles,
              uint16_t* bits) {
  static thread_local ColumnFacts facts;
  facts.of(mc, cols, 16 * nTiles);
  const size_t row = static_cast<size_t>(mc.b) * mc.T;
  const AttnMask& m = mc.m;
  const __m512i shared = _mm512_set1_epi32(kSharedDoc), window = _mm512_set1_epi32(m.window);
  for (int r = 0; r < rowsPad; r++) {
    uint16_t* br = bits + static_cast<size_t>(r) * nTiles;
    if (r >= R) {
      std::fill(br, br + nTiles, 0);
      continue;
    }
    const int q = t0 + r;
    const __m512i vq = _mm512_set1_epi32(q), dq = _mm512_set1_epi32(m.docIds ? m.docIds[row + q] : 0),
                  pq = _mm512_set1_epi32(mc.docPos[row + q]);
    for (int t = 0; t < nTiles; t++) {
      const int c = 16 * t;
      const __m512i d = _mm512_loadu_si512(facts.doc.data() + c);
      const __mmask16 causal = _mm512_cmple_epi32_mask(_mm512_loadu_si512(facts.pos.data() + c), vq);
      const __mmask16 doc = _mm512_cmpeq_epi32_mask(d, dq) | _mm512_cmpeq_epi32_mask(d, shared);
      const __mmask16 near = _mm512_cmplt_epi32_mask(_mm512_sub_epi32(pq, _mm512_loadu_si512(facts.docPos.data() + c)), window);
      const __mmask16 far = _mm512_test_epi32_mask(_mm512_loadu_si512(facts.far.data() + c), _mm512_set1_epi32(-1));
      br[t] = causal & doc & (near | far);
    }
  }
}

// Whether any of rows [r0, r0 + rows) keeps a column of tiles t and t + 1.
inline bool anyKept(const uint16_t* bits, int nTiles, int r0, int rows, int t) {
  unsigned any = 0;
  for (int r = r0; r < r0 + rows; r++) any |= bits[static_cast<size_t>(r) * nTiles + t] | bits[static_cast<size_t>(r) * nTiles + t + 1];
  return any != 0;
}

// Scores of rows [0, rowsPad) against the key tiles, 8 rows and 2 tiles at a time: epi(row, tile, acc of
// tile, acc of tile + 1) with acc[r] the row's 16 scores (left at 0 where the 8 rows keep none of the 32).
template <class Epi>
inline void scoreBlocks(const uint16_t* rowsByD, int rowsPad, const uint16_t* tiles, int nTiles, int D,
                                        const uint16_t* bits, Epi epi) {
  const int DP = D / 2;
  const uint32_t* a = reinterpret_cast<const uint32_t*>(rowsByD);
  for (int r0 = 0; r0 < rowsPad; r0 += 8)
    for (int t = 0; t < nTiles; t += 2) {
      __m512 acc[8][2];
      for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      if (anyKept(bits, nTiles, r0, 8, t))
        pairProduct<2, 8>(a + static_cast<size_t>(r0) * DP, DP, 1, DP, tiles + static_cast<size_t>(t) * DP * 32, 32,
                          static_cast<size_t>(DP) * 32, acc);
      for (int r = 0; r < 8; r++) epi(r0 + r, t, acc[r][0], acc[r][1]);
    }
}

// Where a query block's mask keeps anything, from its bits: each row's first and past-last kept tile, and
// each tile's first and past-last keeping row (empty where first >= past-last).
struct LiveRanges {
  std::vector<int> rowT0, rowT1, tileR0, tileR1;
  void of(const uint16_t* bits, int rows, int nTiles) {
    rowT0.assign(rows, nTiles);
    rowT1.assign(rows, 0);
    tileR0.assign(nTiles, rows);
    tileR1.assign(nTiles, 0);
    for (int r = 0; r < rows; r++)
      for (int t = 0; t < nTiles; t++)
        if (bits[static_cast<size_t>(r) * nTiles + t]) {
          rowT0[r] = std::min(rowT0[r], t);
          rowT1[r] = t + 1;
          tileR0[t] = std::min(tileR0[t], r);
          tileR1[t] = r + 1;
        }
  }
};

// A range of pairs [p0, p1) of a product's contraction.
struct Span {
  int p0, p1;
};

// Rows of a product whose lanes run over d (DV chunks of 16): rows [0, rows) of y = a b, with a's row i as
// pairs a[i * aRow + p * aPair] and b in rows in pairs ([pairs][D][2]); for the RG rows from r0 only the
// pairs span(r0, RG) are summed (a is zero outside them). With accumulate, y is added to; else written, its
// rows times rowScale if given. rows is a multiple of RG.
template <int DV, bool kAccumulate, class SpanOf>
inline void dRows(const uint32_t* a, size_t aRow, size_t aPair, const uint16_t* b, int rows, float* y,
                                  size_t ldy, const float* rowScale, SpanOf span) {
  constexpr int RG = DV <= 2 ? 8 : (DV <= 4 ? 4 : 2);
  constexpr size_t bPair = 32 * DV;
  for (int r0 = 0; r0 < rows; r0 += RG) {
    __m512 acc[RG][DV];
    for (int r = 0; r < RG; r++)
      for (int c = 0; c < DV; c++)
        acc[r][c] = kAccumulate ? _mm512_loadu_ps(y + static_cast<size_t>(r0 + r) * ldy + 16 * c) : _mm512_setzero_ps();
    const Span sp = span(r0, RG);
    if (sp.p1 > sp.p0)
      pairProduct<DV, RG>(a + static_cast<size_t>(r0) * aRow + static_cast<size_t>(sp.p0) * aPair, aRow, aPair, sp.p1 - sp.p0,
                          b + static_cast<size_t>(sp.p0) * bPair, bPair, 32, acc);
    for (int r = 0; r < RG; r++) {
      const __m512 s = _mm512_set1_ps(rowScale ? rowScale[r0 + r] : 1.f);
      for (int c = 0; c < DV; c++) _mm512_storeu_ps(y + static_cast<size_t>(r0 + r) * ldy + 16 * c, _mm512_mul_ps(acc[r][c], s));
    }
  }
}

// The key pairs that rows [r0, r0 + rows) keep any of, and the query row pairs that keep any of keys [j0, j0
// + rows) (rows <= 16, so they lie in one tile).
inline Span keyPairsOfRows(const LiveRanges& lr, int r0, int rows) {
  int t0 = INT32_MAX, t1 = 0;
  for (int r = r0; r < r0 + rows; r++) {
    t0 = std::min(t0, lr.rowT0[r]);
    t1 = std::max(t1, lr.rowT1[r]);
  }
  return {8 * t0, 8 * t1};
}
inline Span rowPairsOfKeys(const LiveRanges& lr, int j0) {
  const int t = j0 / 16;
  return {lr.tileR0[t] / 2, (lr.tileR1[t] + 1) / 2};
}

// The scratch of one thread.
struct Scratch {
  std::vector<int> cols;
  LiveRanges live;
  std::vector<uint16_t> bits, kTiles, vTiles, kPairs, vPairs, qByD, dOByD, qPairs, dOPairs, p16;
  std::vector<float> s, rowOut, inv, lseRow, delta, dKc, dVc;
  std::vector<uint32_t> pT, dsT;
};
thread_local Scratch tScratch;

template <class T>
T* sized(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline int roundUp(int x, int m) { return (x + m - 1) / m * m; }

// A query block [t0, t1) of kv head kvh: its kept columns (in sc.cols; n of them, padded to nP, a multiple
// of 32 and at least 32), its mask as bits and live ranges (sc.bits, sc.live; rows padded to a multiple of
// 16), and the kv head's key and value rows at the columns.
struct Block {
  int n, nP, nTiles;
  const uint16_t* bits;
  Rows kRows, vRows;
};
inline Block prepareBlock(const AttnShape& sh, const MaskCtx& mc, int kvh, int t0, int t1, const float* k, const float* v,
                          Scratch& sc) {
  blockColumns(mc, t0, t1, sc.cols);
  const int n = static_cast<int>(sc.cols.size()), nP = roundUp(std::max(n, 1), 32), nTiles = nP / 16;
  const int R = t1 - t0, rowsPad = roundUp(R, 16);
  const size_t kvRow = static_cast<size_t>(sh.KVH) * sh.D;
  const size_t base = static_cast<size_t>(mc.b) * sh.T * kvRow + static_cast<size_t>(kvh) * sh.D;
  uint16_t* bits = sized(sc.bits, static_cast<size_t>(rowsPad) * nTiles);
  maskBits(mc, t0, R, rowsPad, sc.cols, nTiles, bits);
  sc.live.of(bits, rowsPad, nTiles);
  return {n, nP, nTiles, bits, Rows{k + base, sc.cols.data(), kvRow}, Rows{v + base, sc.cols.data(), kvRow}};
}

template <int DV>
void forwardTask(const AttnShape& sh, const MaskCtx& mc, int kvh, int t0, int t1, const float* q,
                                 const float* k, const float* v, const float* sinkLogit, float* out, float* lse) {
  constexpr int D = 16 * DV;
  const int T = sh.T, H = sh.H, KVH = sh.KVH, G = H / KVH, b = mc.b, R = t1 - t0, rowsPad = roundUp(R, 16);
  Scratch& sc = tScratch;
  const Block blk = prepareBlock(sh, mc, kvh, t0, t1, k, v, sc);
  const int n = blk.n, nP = blk.nP, nTiles = blk.nTiles;
  const uint16_t* bits = blk.bits;
  const Rows& kRows = blk.kRows;
  const Rows& vRows = blk.vRows;
  const size_t ld = static_cast<size_t>(H) * D;
  uint16_t* kTiles = sized(sc.kTiles, static_cast<size_t>(nP) * D);
  uint16_t* vPairs = sized(sc.vPairs, static_cast<size_t>(nP) * D);
  packKeyTiles(kRows, n, nTiles, D, kTiles);
  packRowPairs(vRows, n, nP, D, vPairs);
  uint16_t* qByD = sized(sc.qByD, static_cast<size_t>(rowsPad) * D);
  float* s = sized(sc.s, static_cast<size_t>(rowsPad) * nP);
  uint16_t* p16 = sized(sc.p16, static_cast<size_t>(rowsPad) * nP);
  float* rowOut = sized(sc.rowOut, static_cast<size_t>(rowsPad) * D);
  float* inv = sized(sc.inv, static_cast<size_t>(rowsPad));
  const __m512 minusInf = _mm512_set1_ps(-INFINITY);
  for (int h = kvh * G; h < (kvh + 1) * G; h++) {
    const size_t qo = ((static_cast<size_t>(b) * T + t0) * H + h) * D;
    packRowsByD(Rows{q + qo, nullptr, ld}, R, rowsPad, D, sh.scale, qByD);
    scoreBlocks(qByD, rowsPad, kTiles, nTiles, D, bits, [&](int r, int t, __m512 a0, __m512 a1) {
      float* row = s + static_cast<size_t>(r) * nP + 16 * t;
      const uint16_t* br = bits + static_cast<size_t>(r) * nTiles + t;
      _mm512_storeu_ps(row, _mm512_mask_mov_ps(minusInf, br[0], a0));
      _mm512_storeu_ps(row + 16, _mm512_mask_mov_ps(minusInf, br[1], a1));
    });
    // softmax: p = exp(s - max) as bf16 (0 where masked), lse, and 1 / sum for the output
    const bool hasSink = sinkLogit != nullptr;
    const float sink = hasSink ? sinkLogit[h] : 0.f;
    for (int r = 0; r < rowsPad; r++) {
      const float* sr = s + static_cast<size_t>(r) * nP;
      uint16_t* pr = p16 + static_cast<size_t>(r) * nP;
      __m512 mx = _mm512_set1_ps(hasSink ? sink : -INFINITY);
      for (int j = 0; j < nP; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sr + j));
      const float m = _mm512_reduce_max_ps(mx);
      if (m == -INFINITY) {
        std::fill(pr, pr + nP, 0);
        inv[r] = 0.f;
        if (r < R) lse[(static_cast<size_t>(b) * T + t0 + r) * H + h] = -INFINITY;
        continue;
      }
      const __m512 vm = _mm512_set1_ps(m);
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < nP; j += 32) {
        const __m512 x0 = _mm512_loadu_ps(sr + j), x1 = _mm512_loadu_ps(sr + j + 16);
        const __m512 p0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x0, minusInf, _CMP_NEQ_OQ), exp16(_mm512_sub_ps(x0, vm)));
        const __m512 p1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x1, minusInf, _CMP_NEQ_OQ), exp16(_mm512_sub_ps(x1, vm)));
        sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
        _mm512_storeu_si512(pr + j, toBf16(p0, p1));
      }
      const float total = _mm512_reduce_add_ps(sum) + (hasSink ? std::exp(sink - m) : 0.f);
      inv[r] = 1.f / total;
      if (r < R) lse[(static_cast<size_t>(b) * T + t0 + r) * H + h] = m + std::log(total);
    }
    // O = P V / sum
    dRows<DV, false>(reinterpret_cast<const uint32_t*>(p16), nP / 2, 1, vPairs, rowsPad, rowOut, D, inv,
                     [&](int r0, int rows) { return keyPairsOfRows(sc.live, r0, rows); });
    for (int r = 0; r < R; r++) std::copy(rowOut + static_cast<size_t>(r) * D, rowOut + static_cast<size_t>(r + 1) * D, out + qo + r * ld);
  }
}

template <int DV>
void backwardBlock(const AttnShape& sh, const MaskCtx& mc, int kvh, int t0, int t1, const float* q,
                                   const float* k, const float* v, const float* sinkLogit, const float* out,
                                   const float* lse, const float* dOut, float* dQ, float* dKb, float* dVb,
                                   size_t dStride, float* sinkPart) {
  constexpr int D = 16 * DV;
  const int T = sh.T, H = sh.H, KVH = sh.KVH, G = H / KVH, b = mc.b, R = t1 - t0, rowsPad = roundUp(R, 16);
  Scratch& sc = tScratch;
  const Block blk = prepareBlock(sh, mc, kvh, t0, t1, k, v, sc);
  const int n = blk.n, nP = blk.nP, nTiles = blk.nTiles, DP = D / 2;
  const uint16_t* bits = blk.bits;
  const size_t ld = static_cast<size_t>(H) * D;
  if (n == 0) {
    for (int h = kvh * G; h < (kvh + 1) * G; h++)
      for (int r = 0; r < R; r++) {
        float* row = dQ + ((static_cast<size_t>(b) * T + t0 + r) * H + h) * D;
        std::fill(row, row + D, 0.f);
      }
    return;
  }
  const Rows& kRows = blk.kRows;
  const Rows& vRows = blk.vRows;
  uint16_t* kTiles = sized(sc.kTiles, static_cast<size_t>(nP) * D);
  uint16_t* vTiles = sized(sc.vTiles, static_cast<size_t>(nP) * D);
  uint16_t* kPairs = sized(sc.kPairs, static_cast<size_t>(nP) * D);
  packKeyTiles(kRows, n, nTiles, D, kTiles);
  packKeyTiles(vRows, n, nTiles, D, vTiles);
  packRowPairs(kRows, n, nP, D, kPairs);
  uint16_t* qByD = sized(sc.qByD, static_cast<size_t>(rowsPad) * D);
  uint16_t* dOByD = sized(sc.dOByD, static_cast<size_t>(rowsPad) * D);
  uint16_t* qPairs = sized(sc.qPairs, static_cast<size_t>(rowsPad) * D);
  uint16_t* dOPairs = sized(sc.dOPairs, static_cast<size_t>(rowsPad) * D);
  uint16_t* ds16 = sized(sc.p16, static_cast<size_t>(rowsPad) * nP);
  uint32_t* pT = sized(sc.pT, static_cast<size_t>(rowsPad / 2) * nP);
  uint32_t* dsT = sized(sc.dsT, static_cast<size_t>(rowsPad / 2) * nP);
  float* lseRow = sized(sc.lseRow, static_cast<size_t>(rowsPad));
  float* delta = sized(sc.delta, static_cast<size_t>(rowsPad));
  float* rowOut = sized(sc.rowOut, static_cast<size_t>(rowsPad) * D);
  float* dKc = sized(sc.dKc, static_cast<size_t>(nP) * D);
  float* dVc = sized(sc.dVc, static_cast<size_t>(nP) * D);
  std::fill(dKc, dKc + static_cast<size_t>(nP) * D, 0.f);
  std::fill(dVc, dVc + static_cast<size_t>(nP) * D, 0.f);
  const __m512 scale = _mm512_set1_ps(sh.scale);
  for (int h = kvh * G; h < (kvh + 1) * G; h++) {
    const size_t qo = ((static_cast<size_t>(b) * T + t0) * H + h) * D;
    const Rows qR{q + qo, nullptr, ld}, dOR{dOut + qo, nullptr, ld};
    packRowsByD(qR, R, rowsPad, D, sh.scale, qByD);
    packRowsByD(dOR, R, rowsPad, D, 1.f, dOByD);
    packRowPairs(qR, R, rowsPad, D, qPairs);
    packRowPairs(dOR, R, rowsPad, D, dOPairs);
    for (int r = 0; r < rowsPad; r++) {
      const size_t ro = (static_cast<size_t>(b) * T + t0 + r) * H + h;
      lseRow[r] = r < R ? lse[ro] : -INFINITY;
      delta[r] = 0.f;
      if (r >= R || lseRow[r] == -INFINITY) continue;
      const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(dOut + ro * D), _mm512_loadu_ps(out + ro * D));
      __m512 acc = d;
      for (int c = 1; c < DV; c++)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(dOut + ro * D + 16 * c), _mm512_loadu_ps(out + ro * D + 16 * c), acc);
      delta[r] = _mm512_reduce_add_ps(acc);
      if (sinkLogit) sinkPart[h] -= std::exp(sinkLogit[h] - lseRow[r]) * delta[r];
    }
    // P = exp(s - lse) (0 where masked or the row keeps nothing) and dS = P (dP - delta) scale, dP = dO V^T, 4
    // rows and 32 columns at a time, written as bf16: dS by rows (for dQ), dS and P in pairs of rows (dK, dV)
    const uint32_t* qA = reinterpret_cast<const uint32_t*>(qByD);
    const uint32_t* dOA = reinterpret_cast<const uint32_t*>(dOByD);
    for (int r0 = 0; r0 < rowsPad; r0 += 4)
      for (int t = 0; t < nTiles; t += 2) {
        __m512 s[4][2], dp[4][2];
        for (int r = 0; r < 4; r++) s[r][0] = s[r][1] = dp[r][0] = dp[r][1] = _mm512_setzero_ps();
        if (anyKept(bits, nTiles, r0, 4, t)) {
          pairProduct<2, 4>(qA + static_cast<size_t>(r0) * DP, DP, 1, DP, kTiles + static_cast<size_t>(t) * DP * 32, 32,
                            static_cast<size_t>(DP) * 32, s);
          pairProduct<2, 4>(dOA + static_cast<size_t>(r0) * DP, DP, 1, DP, vTiles + static_cast<size_t>(t) * DP * 32, 32,
                            static_cast<size_t>(DP) * 32, dp);
          for (int r = 0; r < 4; r++) {
            const uint16_t* br = bits + static_cast<size_t>(r0 + r) * nTiles + t;
            const bool live = lseRow[r0 + r] != -INFINITY;
            const __m512 l = _mm512_set1_ps(lseRow[r0 + r]), dl = _mm512_set1_ps(delta[r0 + r]);
            for (int c = 0; c < 2; c++) {
              s[r][c] = _mm512_maskz_mov_ps(live ? br[c] : 0, exp16(_mm512_sub_ps(s[r][c], l)));
              dp[r][c] = _mm512_mul_ps(_mm512_mul_ps(s[r][c], _mm512_sub_ps(dp[r][c], dl)), scale);
            }
          }
        }
        for (int r = 0; r < 4; r++) _mm512_storeu_si512(ds16 + static_cast<size_t>(r0 + r) * nP + 16 * t, toBf16(dp[r][0], dp[r][1]));
        for (int i = 0; i < 2; i++) {
          const size_t o = static_cast<size_t>(r0 / 2 + i) * nP + 16 * t;
          for (int c = 0; c < 2; c++) {
            _mm512_storeu_si512(dsT + o + 16 * c, pairUp(dp[2 * i][c], dp[2 * i + 1][c]));
            _mm512_storeu_si512(pT + o + 16 * c, pairUp(s[2 * i][c], s[2 * i + 1][c]));
          }
        }
      }
    // dQ = dS K
    dRows<DV, false>(reinterpret_cast<const uint32_t*>(ds16), nP / 2, 1, kPairs, rowsPad, rowOut, D, nullptr,
                     [&](int r0, int rows) { return keyPairsOfRows(sc.live, r0, rows); });
    for (int r = 0; r < R; r++) std::copy(rowOut + static_cast<size_t>(r) * D, rowOut + static_cast<size_t>(r + 1) * D, dQ + qo + r * ld);
    // dK += dS^T Q, dV += P^T dO (rows: the block's kv columns; pairs: its query rows)
    const auto rowPairs = [&](int j0, int) { return rowPairsOfKeys(sc.live, j0); };
    dRows<DV, true>(dsT, 1, nP, qPairs, nP, dKc, D, nullptr, rowPairs);
    dRows<DV, true>(pT, 1, nP, dOPairs, nP, dVc, D, nullptr, rowPairs);
  }
  for (int c = 0; c < n; c++) {
    float* dk = dKb + sc.cols[c] * dStride;
    float* dv = dVb + sc.cols[c] * dStride;
    const float* sk = dKc + static_cast<size_t>(c) * D;
    const float* sv = dVc + static_cast<size_t>(c) * D;
    for (int d = 0; d < D; d += 16) {
      _mm512_storeu_ps(dk + d, _mm512_add_ps(_mm512_loadu_ps(dk + d), _mm512_loadu_ps(sk + d)));
      _mm512_storeu_ps(dv + d, _mm512_add_ps(_mm512_loadu_ps(dv + d), _mm512_loadu_ps(sv + d)));
    }
  }
}

using ForwardTaskFn = void (*)(const AttnShape&, const MaskCtx&, int, int, int, const float*, const float*,
                               const float*, const float*, float*, float*);
using BackwardBlockFn = void (*)(const AttnShape&, const MaskCtx&, int, int, int, const float*, const float*,
                                 const float*, const float*, const float*, const float*, const float*, float*, float*,
                                 float*, size_t, float*);
constexpr ForwardTaskFn kForward[4] = {forwardTask<2>, forwardTask<4>, forwardTask<6>, forwardTask<8>};
constexpr BackwardBlockFn kBackward[4] = {backwardBlock<2>, backwardBlock<4>, backwardBlock<6>, backwardBlock<8>};

}  // namespace
#pragma GCC pop_options

static bool applies(const AttnShape& s) {
  return matmulPrecision() == MatmulPrecision::Bf16 && bf16Unit() != Bf16Unit::None && s.D % 32 == 0 && s.D <= 128;
}

bool attentionForwardBf16(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                          const float* sinkLogit, float* out, float* lse) {
  if (!applies(sh)) return false;
  const int B = sh.B, T = sh.T, KVH = sh.KVH;
  std::vector<int32_t> ds = docPositions(B, T, m.docIds);
  const int nBlocks = (T + kQBlock - 1) / kQBlock;
  const ForwardTaskFn task = kForward[sh.D / 32 - 1];
  parallelFor(B * KVH * nBlocks, [&](int i) {
    const int qb = i % nBlocks, bk = i / nBlocks, b = bk / KVH, kvh = bk % KVH;
    const MaskCtx mc{m, T, ds.data(), b};
    task(sh, mc, kvh, qb * kQBlock, std::min(T, (qb + 1) * kQBlock), q, k, v, sinkLogit, out, lse);
  });
  return true;
}

bool attentionBackwardBf16(const AttnShape& sh, const AttnMask& m, const float* q, const float* k, const float* v,
                           const float* sinkLogit, const float* out, const float* lse, const float* dOut, float* dQ,
                           float* dK, float* dV, float* dSinkLogit) {
  if (!applies(sh)) return false;
  const BackwardBlockFn block = kBackward[sh.D / 32 - 1];
  backwardTasks(sh, m, dK, dV, sinkLogit ? dSinkLogit : nullptr,
                [&](const MaskCtx& mc, int kvh, int t0, int t1, float* dKb, float* dVb, size_t stride, float* sinkPart) {
                  block(sh, mc, kvh, t0, t1, q, k, v, sinkLogit, out, lse, dOut, dQ, dKb, dVb, stride, sinkPart);
                });
  return true;
}
#else
bool attentionForwardBf16(const AttnShape&, const AttnMask&, const float*, const float*, const float*, const float*,
                          float*, float*) {
  return false;
}
bool attentionBackwardBf16(const AttnShape&, const AttnMask&, const float*, const float*, const float*, const float*,
                           const float*, const float*, const float*, float*, float*, float*, float*) {
  return false;
}
#endif

}  // namespace sfx
