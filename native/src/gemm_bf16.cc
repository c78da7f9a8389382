// Matrix products in bfloat16: C = alpha op(A) op(B) + beta C with fp32 inputs and outputs, op(A) and op(B)
// rounded to bfloat16 (to nearest even) as they are packed, products accumulated in fp32. sgemm and
// sgemmSerial (gemm.cc) come here when the matmul precision is bf16. Two units compute them, whichever the
// CPU has: AMX (Intel's tile matrix unit, Xeon 4th generation and later) or AVX512-BF16's dot-product
// instruction (AMD Zen 4 and later, Intel Cooper Lake). Both read the same packed operands.
//
// Layout: op(B) is packed into 16-column strips of VNNI tiles (16 rows of 16 column pairs (k, k+1), 1 KiB
// each, one per 32 of depth); op(A), one 32-row block at a time, into pairs of 16 x 32 tiles. On AMX each
// 32 x 32 block of C is four accumulator tiles (tmm0-3) fed by two A tiles (tmm4-5) and two B tiles
// (tmm6-7). With AVX512-BF16 the block is computed 8 rows at a time in 16 vector accumulators: a tile row
// of B (16 columns, one pair of depth each) times a broadcast pair of A, one instruction per row, strip and
// pair. Depth is split in chunks of 1,024 so that the packed B of a chunk stays in L2; C is loaded back
// between chunks. Rows (or, with few rows, columns) are split over the thread pool.
// gemmW16 multiplies by a weight matrix held as bfloat16 (a model's frozen weights): the same kernels read
// it packed a task's columns at a time (never the whole matrix at once), or, without a bf16 unit, blocks of
// it widened to fp32 go through the fp32 kernels.
// Not here: the fp32 kernels (gemm.cc), the choice of precision's callers (addon.cc).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bf16_simd.h"
#include "cpu.h"
#include "gemm_args.h"
#include "kernels.h"
#include "prefetch.h"
#include "simd_math.h"
#include "threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define SFX_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sfx {

#ifdef SFX_BF16
// The packing and the AVX512-BF16 kernel; the AMX kernel adds the tile instructions.
#define SFX_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define SFX_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

// cpuid reports AVX512-F, -BW and -BF16, and the OS saves the 512-bit registers (XCR0 bits 1, 2, 5-7).
static bool detectAvx512Bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30);
  if (!avx512f || !avx512bw) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return false;  // AVX512-BF16
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  return (xlo & 0xe6) == 0xe6;
}

// Besides AVX512-BF16: cpuid reports AMX-BF16 and AMX-TILE, the OS saves the tile state (XCR0 bits 17 and
// 18), and the kernel grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16 and later).
static bool detectAmx() {
  if (!detectAvx512Bf16()) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  if (!tile || !bf16) return false;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 0x60000) != 0x60000) return false;
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

// The unit the CPU has; SINKFLEX_BF16_UNIT=avx512-bf16 chooses the dot-product kernel on an AMX CPU (to
// compare the two), never a unit the CPU lacks. None where SINKFLEX_SIMD holds the kernels below AVX-512
// (as on an AVX2-only CPU).
static Bf16Unit detectBf16Unit() {
  if (simdLevel() != Simd::Avx512) return Bf16Unit::None;
  const char* env = std::getenv("SINKFLEX_BF16_UNIT");
  const bool wantDot = env && !std::strcmp(env, "avx512-bf16");
  if (!wantDot && detectAmx()) return Bf16Unit::Amx;
  return detectAvx512Bf16() ? Bf16Unit::Avx512Bf16 : Bf16Unit::None;
}
#else
static Bf16Unit detectBf16Unit() { return Bf16Unit::None; }
#endif

Bf16Unit bf16Unit() {
  static const Bf16Unit unit = detectBf16Unit();
  return unit;
}

const char* bf16UnitName(Bf16Unit u) {
  switch (u) {
    case Bf16Unit::Amx: return "amx";
    case Bf16Unit::Avx512Bf16: return "avx512-bf16";
    default: return "none";
  }
}

static MatmulPrecision initialPrecision() {
  const char* env = std::getenv("SINKFLEX_MATMUL");
  return env && !std::strcmp(env, "bf16") && bf16Unit() != Bf16Unit::None ? MatmulPrecision::Bf16 : MatmulPrecision::Fp32;
}
static MatmulPrecision gPrecision = initialPrecision();

MatmulPrecision matmulPrecision() { return gPrecision; }

MatmulPrecision setMatmulPrecision(MatmulPrecision p) {
  gPrecision = p == MatmulPrecision::Bf16 && bf16Unit() != Bf16Unit::None ? MatmulPrecision::Bf16 : MatmulPrecision::Fp32;
  return gPrecision;
}

#ifdef SFX_BF16
namespace {

using namespace bf16simd;

constexpr int kTileWords = 512;   // one tile: 16 rows of 64 bytes, in bf16 words
constexpr int kChunkBlocks = 32;  // depth blocks of 32 per chunk (1,024 deep)

struct TileConfig {
  uint8_t palette, startRow;
  uint8_t reserved[14];
  uint16_t colBytes[16];
  uint8_t rows[16];
};

SFX_AMX_TARGET inline void configureTiles() {
  TileConfig c;
  std::memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) {
    c.rows[i] = 16;
    c.colBytes[i] = 64;
  }
  _tile_loadconfig(&c);
}

// The 16 column pairs of rows k and k + 1 of a row-major matrix X (columns c0 .. c0 + nv), as one tile row;
// rows at or past K are zero.
SFX_BF16_TARGET inline __m512i pairRow(const float* X, int ld, int K, int k, int c0, int nv, float alpha) {
  const __m512 lo = k < K ? load16(X + static_cast<size_t>(k) * ld + c0, nv, alpha) : _mm512_setzero_ps();
  const __m512 hi = k + 1 < K ? load16(X + static_cast<size_t>(k + 1) * ld + c0, nv, alpha) : _mm512_setzero_ps();
  return interleavePairs(toBf16(lo, hi));
}

// 32 consecutive values of row r of a row-major matrix X from column k0 (kv of them valid), as bf16.
SFX_BF16_TARGET inline __m512i row32(const float* X, int ld, int r, int k0, int kv, float alpha) {
  const float* p = X + static_cast<size_t>(r) * ld + k0;
  return toBf16(load16(p, kv, alpha), load16(p + 16, kv - 16, alpha));
}

// Depth blocks [kb0, kb1) of the 16-column strip of op(B) at column n0, as VNNI tiles at dst (one per block).
SFX_BF16_TARGET void packBStrip(const GemmArgs& g, int n0, int kb0, int kb1, uint16_t* dst) {
  const int nv = std::min(16, g.N - n0);
  for (int kb = kb0; kb < kb1; kb++) {
    const int k0 = kb * 32;
    __m512i v[16];
    if (!g.tb) {  // B is [K, N]: tile row r holds the pairs of B's rows k0 + 2r and k0 + 2r + 1
      for (int r = 0; r < 16; r++) v[r] = pairRow(g.B, g.ldb, g.K, k0 + 2 * r, n0, nv, 1.f);
    } else {  // B is [N, K]: B's row n0 + j is column j of the tile
      for (int j = 0; j < 16; j++) v[j] = j < nv ? row32(g.B, g.ldb, n0 + j, k0, g.K - k0, 1.f) : _mm512_setzero_si512();
      transpose16(v);
    }
    uint16_t* t = dst + static_cast<size_t>(kb - kb0) * kTileWords;
    for (int r = 0; r < 16; r++) _mm512_storeu_si512(t + r * 32, v[r]);
  }
}

// Depth blocks [kb0, kb1) of the 16 rows of alpha op(A) from row m0, as tiles at dst, one every `stride` words.
SFX_BF16_TARGET void packARows(const GemmArgs& g, int m0, int kb0, int kb1, uint16_t* dst, size_t stride) {
  const int mv = std::min(16, g.M - m0);
  for (int kb = kb0; kb < kb1; kb++) {
    const int k0 = kb * 32;
    __m512i v[16];
    if (!g.ta) {  // A is [M, K]: tile row i is A's row m0 + i
      for (int i = 0; i < 16; i++) v[i] = i < mv ? row32(g.A, g.lda, m0 + i, k0, g.K - k0, g.alpha) : _mm512_setzero_si512();
    } else {  // A is [K, M]: pairs of A's rows, transposed
      for (int r = 0; r < 16; r++) v[r] = pairRow(g.A, g.lda, g.K, k0 + 2 * r, m0, mv, g.alpha);
      transpose16(v);
    }
    uint16_t* t = dst + static_cast<size_t>(kb - kb0) * stride;
    for (int i = 0; i < 16; i++) _mm512_storeu_si512(t + i * 32, v[i]);
  }
}

// Calls fn(element of C, its slot in `edge`) for the elements of the 32 x 32 block at (m0, n0) inside C;
// `edge` holds the block as four 16 x 16 tiles (zero where the block crosses C's edge).
template <class Fn>
inline void forEachInBlock(const GemmArgs& g, int m0, int n0, Fn fn) {
  for (int t = 0; t < 4; t++)
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        const int r = m0 + (t >> 1) * 16 + i, c = n0 + (t & 1) * 16 + j;
        if (r < g.M && c < g.N) fn(g.C[static_cast<size_t>(r) * g.ldc + c], t * 256 + i * 16 + j);
      }
}

// Loads (kStore false) or stores the four accumulator tiles tmm0-3 of a 32 x 32 block held as four 16 x 16
// quarters at q[0..3], `stride` bytes between rows.
template <bool kStore>
SFX_AMX_TARGET inline void moveAccumulators(float* const q[4], size_t stride) {
  if constexpr (kStore) {
    _tile_stored(0, q[0], stride);
    _tile_stored(1, q[1], stride);
    _tile_stored(2, q[2], stride);
    _tile_stored(3, q[3], stride);
  } else {
    _tile_loadd(0, q[0], stride);
    _tile_loadd(1, q[1], stride);
    _tile_loadd(2, q[2], stride);
    _tile_loadd(3, q[3], stride);
  }
}

// The accumulator tiles to or from the 32 x 32 block of C at (m0, n0): straight from C when the block lies
// inside it, else through `edge` (4 x 256 floats; zero outside C). Loading with zero = true zeroes them.
template <bool kStore>
SFX_AMX_TARGET void moveBlock(const GemmArgs& g, int m0, int n0, bool zero, float* edge) {
  if (!kStore && zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    return;
  }
  if (m0 + 32 <= g.M && n0 + 32 <= g.N) {
    float* c = g.C + static_cast<size_t>(m0) * g.ldc + n0;
    float* const q[4] = {c, c + 16, c + static_cast<size_t>(16) * g.ldc, c + static_cast<size_t>(16) * g.ldc + 16};
    moveAccumulators<kStore>(q, static_cast<size_t>(g.ldc) * sizeof(float));
    return;
  }
  float* const q[4] = {edge, edge + 256, edge + 512, edge + 768};
  if constexpr (kStore) {
    moveAccumulators<true>(q, 64);
    forEachInBlock(g, m0, n0, [&](float& c, int k) { c = edge[k]; });
  } else {
    std::memset(edge, 0, 4 * 256 * sizeof(float));
    forEachInBlock(g, m0, n0, [&](float& c, int k) { edge[k] = c; });
    moveAccumulators<false>(q, 64);
  }
}

// The 32-row block of alpha op(A) at row m0, depth blocks [kb0, kb1), into the thread's panel: two tiles per
// depth block (rows m0..m0+15, then m0+16..m0+31; zero past M).
SFX_BF16_TARGET const uint16_t* packABlock(const GemmArgs& g, int m0, int kb0, int kb1) {
  const int nkb = kb1 - kb0;
  static thread_local std::vector<uint16_t> apanel;
  apanel.resize(static_cast<size_t>(nkb) * 2 * kTileWords);
  uint16_t* Ap = apanel.data();
  packARows(g, m0, kb0, kb1, Ap, 2 * kTileWords);
  if (m0 + 16 < g.M) packARows(g, m0 + 16, kb0, kb1, Ap + kTileWords, 2 * kTileWords);
  else for (int kb = 0; kb < nkb; kb++) std::memset(Ap + (2 * kb + 1) * kTileWords, 0, kTileWords * sizeof(uint16_t));
  return Ap;
}

// Row blocks [mb0, mb1) x strip pairs [np0, np1) of C over depth blocks [kb0, kb1), from the packed B of that
// chunk (strip s at Bp + s * nkb * kTileWords), on the tile unit. zero: the chunk is the first and beta is 0.
SFX_AMX_TARGET void computeRectAmx(const GemmArgs& g, const uint16_t* Bp, int kb0, int kb1, bool zero,
                                int mb0, int mb1, int np0, int np1) {
  const int nkb = kb1 - kb0, nStrips = (g.N + 15) / 16;
  alignas(64) float edge[4 * 256];
  configureTiles();
  for (int mb = mb0; mb < mb1; mb++) {
    const int m0 = mb * 32;
    const uint16_t* Ap = packABlock(g, m0, kb0, kb1);
    for (int np = np0; np < np1; np++) {
      const int s0 = 2 * np, n0 = s0 * 16;
      const uint16_t* b0 = Bp + static_cast<size_t>(s0) * nkb * kTileWords;
      const uint16_t* b1 = s0 + 1 < nStrips ? b0 + static_cast<size_t>(nkb) * kTileWords : b0;  // past N: unused columns
      moveBlock<false>(g, m0, n0, zero, edge);
      for (int kb = 0; kb < nkb; kb++) {
        _tile_loadd(4, Ap + static_cast<size_t>(2 * kb) * kTileWords, 64);
        _tile_loadd(5, Ap + static_cast<size_t>(2 * kb + 1) * kTileWords, 64);
        _tile_loadd(6, b0 + static_cast<size_t>(kb) * kTileWords, 64);
        _tile_loadd(7, b1 + static_cast<size_t>(kb) * kTileWords, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      moveBlock<true>(g, m0, n0, false, edge);
    }
  }
  _tile_release();
}

// The columns of C's row r in [n0, n0 + 16) that lie inside C.
inline __mmask16 columnMask(const GemmArgs& g, int n0) {
  const int n = g.N - n0;
  return n >= 16 ? 0xffff : (n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1));
}

// R rows of C (rows r0 .. r0 + R - 1 of a 32-row block, `rows` <= R of them inside C) x the 32 columns of two
// strips, over the chunk's depth blocks: the rows' values in 2R accumulators. For each pair of depth, the B tile
// row of each strip (16 columns, one (k, k+1) pair each) is multiplied by the row's (k, k+1) pair of A,
// broadcast: one vdpbf16ps per row and strip, in depth order, as on the tiles. A row's values do not depend
// on R (the same instructions on the same values in the same order), so a product of few rows computes only
// those, and each row still equals what it is in a product of many.
template <int R>
SFX_BF16_TARGET __attribute__((always_inline)) inline void dotRows(const GemmArgs& g, const uint16_t* a, const uint16_t* b0,
                                                                   const uint16_t* b1, int nkb, float* c, int rows,
                                                                   bool zero, __mmask16 mask0, __mmask16 mask1) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; r++) {
    const bool load = !zero && r < rows;
    acc0[r] = load ? _mm512_maskz_loadu_ps(mask0, c + static_cast<size_t>(r) * g.ldc) : _mm512_setzero_ps();
    acc1[r] = load ? _mm512_maskz_loadu_ps(mask1, c + static_cast<size_t>(r) * g.ldc + 16) : _mm512_setzero_ps();
  }
  for (int kb = 0; kb < nkb; kb++) {
    const uint16_t* at = a + static_cast<size_t>(2 * kb) * kTileWords;
    const uint16_t* bt0 = b0 + static_cast<size_t>(kb) * kTileWords;
    const uint16_t* bt1 = b1 + static_cast<size_t>(kb) * kTileWords;
    for (int p = 0; p < 16; p++) {
      const __m512bh v0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bt0 + p * 32));
      const __m512bh v1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bt1 + p * 32));
      for (int r = 0; r < R; r++) {
        int32_t pair;
        std::memcpy(&pair, at + r * 32 + 2 * p, sizeof pair);
        const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        acc0[r] = _mm512_dpbf16_ps(acc0[r], x, v0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], x, v1);
      }
    }
  }
  for (int r = 0; r < rows; r++) {
    _mm512_mask_storeu_ps(c + static_cast<size_t>(r) * g.ldc, mask0, acc0[r]);
    _mm512_mask_storeu_ps(c + static_cast<size_t>(r) * g.ldc + 16, mask1, acc1[r]);
  }
}

// The same rectangle as computeRectAmx, with AVX512-BF16 dot products: each 32 x 32 block of C in four groups
// of 8 rows (dotRows), a group's 8 x 32 values in 16 accumulators; a last group of fewer rows (decoding a few
// sequences) in groups of 4, 2 and 1, so no dot product is spent on rows past C's end.
// Its loops over blocks repeat computeRectAmx's on purpose: with the strip pointers from a shared helper
// (returning a pair) GCC compiled this kernel 2x slower.
SFX_BF16_TARGET void computeRectDot(const GemmArgs& g, const uint16_t* Bp, int kb0, int kb1, bool zero,
                                    int mb0, int mb1, int np0, int np1) {
  constexpr int kRows = 8;
  const int nkb = kb1 - kb0, nStrips = (g.N + 15) / 16;
  for (int mb = mb0; mb < mb1; mb++) {
    const int m0 = mb * 32;
    const uint16_t* Ap = packABlock(g, m0, kb0, kb1);
    for (int np = np0; np < np1; np++) {
      const int s0 = 2 * np, n0 = s0 * 16;
      const uint16_t* b0 = Bp + static_cast<size_t>(s0) * nkb * kTileWords;
      const uint16_t* b1 = s0 + 1 < nStrips ? b0 + static_cast<size_t>(nkb) * kTileWords : b0;  // past N: unused columns
      const __mmask16 mask0 = columnMask(g, n0), mask1 = columnMask(g, n0 + 16);
      for (int r0 = 0; r0 < 32 && m0 + r0 < g.M; r0 += kRows) {
        const int rows = std::min(kRows, g.M - m0 - r0);
        float* c = g.C + static_cast<size_t>(m0 + r0) * g.ldc + n0;
        // rows r0 .. r0 + 7 lie in one A tile of the block (tile r0 / 16, from its row r0 % 16)
        const uint16_t* a = Ap + (r0 / 16) * kTileWords + (r0 % 16) * 32;
        if (rows == kRows) {
          dotRows<kRows>(g, a, b0, b1, nkb, c, rows, zero, mask0, mask1);
          continue;
        }
        int r = 0;
        if (rows - r >= 4) {
          dotRows<4>(g, a + r * 32, b0, b1, nkb, c + static_cast<size_t>(r) * g.ldc, 4, zero, mask0, mask1);
          r += 4;
        }
        if (rows - r >= 2) {
          dotRows<2>(g, a + r * 32, b0, b1, nkb, c + static_cast<size_t>(r) * g.ldc, 2, zero, mask0, mask1);
          r += 2;
        }
        if (rows - r >= 1) dotRows<1>(g, a + r * 32, b0, b1, nkb, c + static_cast<size_t>(r) * g.ldc, 1, zero, mask0, mask1);
      }
    }
  }
}

// ---- products with bf16 weights (gemmW16)

// The strip of 16 columns of op(W) at column n0, depth blocks [kb0, kb1), as VNNI tiles at dst: op(W) = W^T
// with W stored [N, K] (transW), or W itself stored [K, N]. W is bfloat16 already: nothing is rounded.
SFX_BF16_TARGET void packW16Strip(bool transW, const uint16_t* W, int ldw, int N, int K, int n0, int kb0, int kb1,
                                  uint16_t* dst) {
  const int nv = std::min(16, N - n0);
  const __mmask16 cols = nv >= 16 ? 0xffff : static_cast<__mmask16>((1u << nv) - 1);
  for (int kb = kb0; kb < kb1; kb++) {
    const int k0 = kb * 32, kv = K - k0;
    __m512i v[16];
    if (transW) {  // W's row n0 + j (32 of its depth) is column j of the tile
      const __mmask32 depth = kv >= 32 ? 0xffffffffu : static_cast<__mmask32>((1u << kv) - 1);
      for (int j = 0; j < 16; j++)
        v[j] = j < nv ? _mm512_maskz_loadu_epi16(depth, W + static_cast<size_t>(n0 + j) * ldw + k0) : _mm512_setzero_si512();
      transpose16(v);
    } else {  // tile row r: the column pairs of W's rows k0 + 2r and k0 + 2r + 1
      for (int r = 0; r < 16; r++) {
        const int k = k0 + 2 * r;
        const __m512i lo = k < K ? _mm512_maskz_loadu_epi16(cols, W + static_cast<size_t>(k) * ldw + n0) : _mm512_setzero_si512();
        const __m512i hi = k + 1 < K ? _mm512_maskz_loadu_epi16(cols, W + static_cast<size_t>(k + 1) * ldw + n0) : _mm512_setzero_si512();
        v[r] = interleavePairs(_mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1));
      }
    }
    uint16_t* t = dst + static_cast<size_t>(kb - kb0) * kTileWords;
    for (int r = 0; r < 16; r++) _mm512_storeu_si512(t + r * 32, v[r]);
  }
}

// gemmW16 of a few rows (decoding) with AVX512-BF16, streaming W: each group of 32 rows of W (two strips
// of op(W) = W^T) is read once, a depth block at a time straight from memory into registers, transposed
// there into the strips' VNNI tiles, and multiplied by each row of A; no packed copy is written. The
// instructions on each row of C are dotRows' (the same tile rows, the same broadcast pairs of A rounded as
// packARows rounds them, in the same depth order), so a row's values are those the packing kernel gives
// it: a sequence samples the same whether it decodes alone or beside others. While a group is multiplied,
// the next group's memory is prefetched into L2 in address order: read 32 rows side by side, W streams at
// about twice the rate the hardware's own prefetching gives (docs/benchmarks.md).
constexpr int kStreamMaxRows = 8;  // products of at most this many rows stream W (more: gemmW16Unit)

// Rows [0, R) of A (alpha applied), rounded to bf16 as packARows rounds them, kb blocks of 32 each (zero
// past K), into xb: row r's pair p of depth block kb is the 32-bit word at xb + r * stride + kb * 32 + 2p.
template <int R>
SFX_BF16_TARGET void roundRows(const GemmArgs& g, uint16_t* xb, int stride) {
  const int nkb = (g.K + 31) / 32;
  for (int r = 0; r < R; r++)
    for (int kb = 0; kb < nkb; kb++)
      _mm512_storeu_si512(xb + static_cast<size_t>(r) * stride + kb * 32, row32(g.A, g.lda, r, kb * 32, g.K - kb * 32, g.alpha));
}

// Groups [gr0, gr1) of 32 rows of W times the R rows of A rounded in xb, into C's columns of those rows.
template <int R>
SFX_BF16_TARGET void streamGroupsW16(const GemmArgs& g, const uint16_t* W, int ldw, const uint16_t* xb, int stride,
                                     int gr0, int gr1, bool zero) {
  const int nkb = (g.K + 31) / 32;
  for (int gr = gr0; gr < gr1; gr++) {
    const int n0 = gr * 32;
    const int nv[2] = {std::min(16, g.N - n0), std::max(0, std::min(16, g.N - n0 - 16))};
    const __mmask16 mask[2] = {columnMask(g, n0), columnMask(g, n0 + 16)};
    // the next group's rows, prefetched into L2 a share at each depth block
    const PrefetchAhead next(W + static_cast<size_t>(n0 + 32) * ldw, rowSpanBytes(n0 + 32, 32, g.N, g.K, ldw, sizeof(uint16_t)), nkb);
    __m512 acc[2][R];
    for (int s = 0; s < 2; s++)
      for (int r = 0; r < R; r++)
        acc[s][r] = zero ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[s], g.C + static_cast<size_t>(r) * g.ldc + n0 + 16 * s);
    for (int kb = 0; kb < nkb; kb++) {
      const int k0 = kb * 32, kv = g.K - k0;
      const __mmask32 depth = kv >= 32 ? 0xffffffffu : static_cast<__mmask32>((1u << kv) - 1);
      next.step(kb);
      for (int s = 0; s < 2; s++) {
        if (nv[s] == 0) continue;
        const uint16_t* w = W + static_cast<size_t>(n0 + 16 * s) * ldw + k0;
        __m512i v[16];
        for (int j = 0; j < 16; j++) v[j] = j < nv[s] ? _mm512_maskz_loadu_epi16(depth, w + static_cast<size_t>(j) * ldw) : _mm512_setzero_si512();
        transpose16(v);
        for (int p = 0; p < 16; p++)
          for (int r = 0; r < R; r++) {
            int32_t pair;
            std::memcpy(&pair, xb + static_cast<size_t>(r) * stride + k0 + 2 * p, sizeof pair);
            acc[s][r] = _mm512_dpbf16_ps(acc[s][r], reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair)), reinterpret_cast<__m512bh>(v[p]));
          }
      }
    }
    for (int s = 0; s < 2; s++)
      if (nv[s] > 0)
        for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(g.C + static_cast<size_t>(r) * g.ldc + n0 + 16 * s, mask[s], acc[s][r]);
  }
}

// gemmW16 of M <= kStreamMaxRows rows with W stored [N, K] (transW), on AVX512-BF16: the groups of 32 rows
// of W split into one contiguous range per thread.
template <int R>
SFX_BF16_TARGET void streamW16(const GemmArgs& g, const uint16_t* W, int ldw, bool parallel) {
  const int nkb = (g.K + 31) / 32, stride = nkb * 32;
  static thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(R) * stride);
  uint16_t* xb = rounded.data();
  roundRows<R>(g, xb, stride);
  const int groups = (g.N + 31) / 32, threads = parallel ? std::min(poolThreads(), groups) : 1;
  const bool zero = g.beta == 0.f;
  if (threads <= 1) {
    streamGroupsW16<R>(g, W, ldw, xb, stride, 0, groups, zero);
    return;
  }
  parallelFor(threads, [&](int t) {
    streamGroupsW16<R>(g, W, ldw, xb, stride, groups * t / threads, groups * (t + 1) / threads, zero);
  });
}

void streamW16Rows(const GemmArgs& g, const uint16_t* W, int ldw, bool parallel) {
  switch (g.M) {
    case 1: streamW16<1>(g, W, ldw, parallel); break;
    case 2: streamW16<2>(g, W, ldw, parallel); break;
    case 3: streamW16<3>(g, W, ldw, parallel); break;
    case 4: streamW16<4>(g, W, ldw, parallel); break;
    case 5: streamW16<5>(g, W, ldw, parallel); break;
    case 6: streamW16<6>(g, W, ldw, parallel); break;
    case 7: streamW16<7>(g, W, ldw, parallel); break;
    default: streamW16<8>(g, W, ldw, parallel); break;
  }
}

// gemmW16 on the bf16 unit: tasks of 128 columns (and, with fewer column groups than threads, row ranges);
// each packs its own strips of op(W), a depth chunk at a time, so the packed copy of a task stays in L2 and
// the whole packed W never exists. A is rounded to bf16 as it is packed (as in sgemmBf16).
void gemmW16Unit(const GemmArgs& g, bool transW, const uint16_t* W, int ldw, bool parallel) {
  constexpr int kGroupCols = 128;
  const int kBlocks = (g.K + 31) / 32, mBlocks = (g.M + 31) / 32, nGroups = (g.N + kGroupCols - 1) / kGroupCols;
  const int threads = parallel ? poolThreads() : 1;
  const int rowSplits = nGroups >= threads ? 1 : std::min(mBlocks, (threads + nGroups - 1) / nGroups);
  const int chunk = kBlocks <= kChunkBlocks * 3 / 2 ? kBlocks : kChunkBlocks;
  const auto computeRect = bf16Unit() == Bf16Unit::Amx ? computeRectAmx : computeRectDot;
  auto task = [&](int t) {
    const int n0 = (t / rowSplits) * kGroupCols, rs = t % rowSplits;
    const int mb0 = mBlocks * rs / rowSplits, mb1 = mBlocks * (rs + 1) / rowSplits;
    if (mb0 >= mb1) return;
    GemmArgs sub = g;
    sub.C = g.C + n0;
    sub.N = std::min(g.N, n0 + kGroupCols) - n0;
    const int strips = (sub.N + 15) / 16;
    static thread_local std::vector<uint16_t> panel;
    for (int kb0 = 0; kb0 < kBlocks; kb0 += chunk) {
      const int kb1 = std::min(kBlocks, kb0 + chunk), nkb = kb1 - kb0;
      panel.resize(static_cast<size_t>(strips) * nkb * kTileWords);
      for (int s = 0; s < strips; s++)
        packW16Strip(transW, W, ldw, g.N, g.K, n0 + s * 16, kb0, kb1, panel.data() + static_cast<size_t>(s) * nkb * kTileWords);
      computeRect(sub, panel.data(), kb0, kb1, kb0 == 0 && g.beta == 0.f, mb0, mb1, 0, (strips + 1) / 2);
    }
  };
  const int tasks = nGroups * rowSplits;
  if (threads == 1) for (int t = 0; t < tasks; t++) task(t);
  else parallelFor(tasks, task);
}

}  // namespace

void sgemmBf16(const GemmArgs& g, bool parallel) {
  const int M = g.M, N = g.N, K = g.K;
  if (M <= 0 || N <= 0) return;
  const int kBlocks = (K + 31) / 32, nStrips = (N + 15) / 16, nPairs = (nStrips + 1) / 2, mBlocks = (M + 31) / 32;
  const int threads = parallel ? poolThreads() : 1;
  // tasks: tm row ranges x tn column ranges; columns are split only when there are fewer row blocks than threads
  const int tm = std::min(mBlocks, threads);
  const int tn = tm < threads ? std::min(nPairs, (threads + tm - 1) / tm) : 1;
  const auto computeRect = bf16Unit() == Bf16Unit::Amx ? computeRectAmx : computeRectDot;
  static thread_local std::vector<uint16_t> bpanel;
  const int chunk = kBlocks <= kChunkBlocks * 3 / 2 ? kBlocks : kChunkBlocks;
  for (int kb0 = 0; kb0 < kBlocks; kb0 += chunk) {
    const int kb1 = std::min(kBlocks, kb0 + chunk), nkb = kb1 - kb0;
    bpanel.resize(static_cast<size_t>(nStrips) * nkb * kTileWords);
    uint16_t* Bp = bpanel.data();
    auto pack = [&](int s) { packBStrip(g, s * 16, kb0, kb1, Bp + static_cast<size_t>(s) * nkb * kTileWords); };
    const bool zero = kb0 == 0 && g.beta == 0.f;
    if (threads == 1) {
      for (int s = 0; s < nStrips; s++) pack(s);
      computeRect(g, Bp, kb0, kb1, zero, 0, mBlocks, 0, nPairs);
      continue;
    }
    parallelFor(std::min(threads, nStrips), [&](int t) {
      for (int s = nStrips * t / std::min(threads, nStrips); s < nStrips * (t + 1) / std::min(threads, nStrips); s++) pack(s);
    });
    parallelFor(tm * tn, [&](int t) {
      const int a = t / tn, b = t % tn;
      const int mb0 = mBlocks * a / tm, mb1 = mBlocks * (a + 1) / tm, np0 = nPairs * b / tn, np1 = nPairs * (b + 1) / tn;
      if (mb0 < mb1 && np0 < np1) computeRect(g, Bp, kb0, kb1, zero, mb0, mb1, np0, np1);
    });
  }
}
#else
void sgemmBf16(const GemmArgs&, bool) {
  std::abort();  // never called: bf16Unit() is None
}
#endif

// dst[i] = the fp32 bits of bfloat16 src[i] (its 16 bits shifted up), n values, in the CPU's widest vectors.
SFX_CLONES static void widenBf16(const uint16_t* __restrict src, uint32_t* __restrict dst, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) dst[i] = static_cast<uint32_t>(src[i]) << 16;
}

// ---- products of a few rows with bf16 weights, without a bf16 unit (AVX2 and FMA)

#if defined(__x86_64__) && defined(__GNUC__)
#define SFX_AVX2_TARGET __attribute__((target("avx2,fma")))

// Sums over the fp32 kernels' depth blocks for R rows of A against groups of 32 rows of W (bf16, [N, K]),
// the values gemmW16Widen gives (the fp32 micro-kernels' order: per element of C, a chain of fused
// multiply-adds from zero over each depth block of gemmBlockDepth(K), added to C after the block, the
// first block storing it where beta is 0; A times alpha as the packing rounds it). W streams from memory
// once: 8 rows x 8 depth at a time, widened and transposed in registers so that lane j holds row j, with
// the next group prefetched into L2 in address order; x broadcast one depth at a time. Four strips of 8
// rows make four independent chains per row of A.
template <int R>
SFX_AVX2_TARGET void streamGroupsW16Avx2(const GemmArgs& g, const uint16_t* W, int ldw, const float* xs, int gr0, int gr1) {
  const int K = g.K, Kx = (K + 7) / 8 * 8, kcMax = gemmBlockDepth(K);  // xs: rows of Kx, zero past K
  for (int gr = gr0; gr < gr1; gr++) {
    const int n0 = gr * 32;
    int nv[4];
    for (int s = 0; s < 4; s++) nv[s] = std::max(0, std::min(8, g.N - n0 - 8 * s));
    const PrefetchAhead next(W + static_cast<size_t>(n0 + 32) * ldw, rowSpanBytes(n0 + 32, 32, g.N, K, ldw, sizeof(uint16_t)), Kx / 8);
    size_t step = 0;
    for (int pc = 0; pc < K; pc += kcMax) {
      const int kc = std::min(kcMax, K - pc);
      __m256 acc[4][R];
      for (int s = 0; s < 4; s++)
        for (int r = 0; r < R; r++) acc[s][r] = _mm256_setzero_ps();
      for (int k0 = pc; k0 < pc + kc; k0 += 8, step++) {
        const int kv = std::min(8, pc + kc - k0);
        next.step(step);
        // unrolled, so that the four strips' sums stay in registers (an array indexed at run time is kept
        // in memory and stored on every tile)
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
          if (nv[s] == 0) continue;
          // rows n0 + 8s + j, depth k0 .. k0 + 7, widened to fp32 (zero past K and past N)
          __m256 t[8];
          for (int j = 0; j < 8; j++) {
            __m128i h = _mm_setzero_si128();
            if (j < nv[s]) {
              const uint16_t* w = W + static_cast<size_t>(n0 + 8 * s + j) * ldw + k0;
              if (kv == 8) h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
              else {
                alignas(16) uint16_t tail[8] = {};
                std::memcpy(tail, w, sizeof(uint16_t) * kv);
                h = _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
              }
            }
            t[j] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
          }
          // transpose: t[k] lane j = W[n0 + 8s + j][k0 + k]
          __m256 u[8], v[8];
          for (int i = 0; i < 4; i++) {
            u[2 * i] = _mm256_unpacklo_ps(t[2 * i], t[2 * i + 1]);
            u[2 * i + 1] = _mm256_unpackhi_ps(t[2 * i], t[2 * i + 1]);
          }
          for (int i = 0; i < 2; i++) {
            v[4 * i + 0] = _mm256_shuffle_ps(u[4 * i + 0], u[4 * i + 2], 0x44);
            v[4 * i + 1] = _mm256_shuffle_ps(u[4 * i + 0], u[4 * i + 2], 0xee);
            v[4 * i + 2] = _mm256_shuffle_ps(u[4 * i + 1], u[4 * i + 3], 0x44);
            v[4 * i + 3] = _mm256_shuffle_ps(u[4 * i + 1], u[4 * i + 3], 0xee);
          }
          for (int i = 0; i < 4; i++) {
            t[i] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x20);
            t[i + 4] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x31);
          }
          // a whole tile, past K too: there x and W are zero, and adding an exact zero leaves a sum as it
          // is (a sum that starts at +0 is never -0), so the values are the micro-kernels' all the same
#pragma GCC unroll 8
          for (int k = 0; k < 8; k++)
            for (int r = 0; r < R; r++)
              acc[s][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xs + static_cast<size_t>(r) * Kx + k0 + k), t[k], acc[s][r]);
        }
      }
      // C = acc (the first block, beta 0) or C + acc, as the micro-kernels store
      const bool first = pc == 0 && g.beta == 0.f;
      for (int s = 0; s < 4; s++) {
        if (nv[s] == 0) continue;
        for (int r = 0; r < R; r++) {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, acc[s][r]);
          float* c = g.C + static_cast<size_t>(r) * g.ldc + n0 + 8 * s;
          for (int j = 0; j < nv[s]; j++) c[j] = first ? lanes[j] : c[j] + lanes[j];
        }
      }
    }
  }
}

// gemmW16 of M <= kStreamMaxRowsAvx2 rows with W stored [N, K] where the products widen W to fp32: A times
// alpha (as packA rounds it), then the groups of 32 rows of W, one contiguous range per thread.
template <int R>
void streamW16Avx2(const GemmArgs& g, const uint16_t* W, int ldw) {
  static thread_local std::vector<float> scaled;
  const int Kx = (g.K + 7) / 8 * 8;
  scaled.assign(static_cast<size_t>(R) * Kx, 0.f);
  for (int r = 0; r < R; r++)
    for (int k = 0; k < g.K; k++) scaled[static_cast<size_t>(r) * Kx + k] = g.A[static_cast<size_t>(r) * g.lda + k] * g.alpha;
  const float* xs = scaled.data();
  const int groups = (g.N + 31) / 32, threads = std::min(poolThreads(), groups);
  if (threads <= 1) return streamGroupsW16Avx2<R>(g, W, ldw, xs, 0, groups);
  parallelFor(threads, [&](int t) { streamGroupsW16Avx2<R>(g, W, ldw, xs, groups * t / threads, groups * (t + 1) / threads); });
}

constexpr int kStreamMaxRowsAvx2 = 4;

static void streamW16RowsAvx2(const GemmArgs& g, const uint16_t* W, int ldw) {
  switch (g.M) {
    case 1: return streamW16Avx2<1>(g, W, ldw);
    case 2: return streamW16Avx2<2>(g, W, ldw);
    case 3: return streamW16Avx2<3>(g, W, ldw);
    default: return streamW16Avx2<4>(g, W, ldw);
  }
}
#endif

// Without a bf16 unit (or with SINKFLEX_SIMD below AVX-512): blocks of op(W), a few hundred KiB each, widened
// to fp32 and multiplied by the fp32 kernels (gemm.cc, at the SIMD level in effect); A stays fp32.
static void gemmW16Widen(const GemmArgs& g, bool transW, const uint16_t* W, int ldw, bool parallel) {
  const int K = g.K;
  const int nb = std::max(16, std::min((g.N + 15) / 16 * 16, (131072 / K) / 16 * 16));
  const int blocks = (g.N + nb - 1) / nb;
  auto task = [&](int b) {
    const int n0 = b * nb, n = std::min(nb, g.N - n0);
    static thread_local std::vector<float> wide;
    wide.resize(static_cast<size_t>(n) * K);
    uint32_t* w = reinterpret_cast<uint32_t*>(wide.data());
    if (transW) {
      for (int r = 0; r < n; r++) widenBf16(W + static_cast<size_t>(n0 + r) * ldw, w + static_cast<size_t>(r) * K, K);
    } else {
      for (int k = 0; k < K; k++) widenBf16(W + static_cast<size_t>(k) * ldw + n0, w + static_cast<size_t>(k) * n, n);
    }
    sgemmSerial(false, transW, g.M, n, K, g.alpha, g.A, g.lda, wide.data(), transW ? K : n, g.beta, g.C + n0, g.ldc);
  };
  if (!parallel || blocks == 1) for (int b = 0; b < blocks; b++) task(b);
  else parallelFor(blocks, task);
}

void gemmW16(bool transW, int M, int N, int K, float alpha, const float* A, int lda, const uint16_t* W, int ldw,
             float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  GemmArgs g{false, transW, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc};
  if (K <= 0 || alpha == 0.f || (beta != 0.f && beta != 1.f)) {
    for (int i = 0; i < M; i++) {
      float* c = C + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < N; j++) c[j] = beta == 0.f ? 0.f : beta * c[j];
    }
    if (K <= 0 || alpha == 0.f) return;
    g.beta = 1.f;
  }
#ifdef SFX_BF16
  if (bf16Unit() != Bf16Unit::None && simdLevel() == Simd::Avx512) {
    // AMX's tiles keep their own kernel for every M, so that a row's values never depend on M there either
    if (bf16Unit() == Bf16Unit::Avx512Bf16 && transW && M <= kStreamMaxRows) {
      streamW16Rows(g, W, ldw, true);
      return;
    }
    gemmW16Unit(g, transW, W, ldw, true);
    return;
  }
#endif
#if defined(__x86_64__) && defined(__GNUC__)
  // few rows on the fp32 kernels (AVX2 or AVX-512 with FMA): W streamed, the same values as widening it
  if (transW && M <= kStreamMaxRowsAvx2 && (simdLevel() == Simd::Avx2 || simdLevel() == Simd::Avx512)) {
    streamW16RowsAvx2(g, W, ldw);
    return;
  }
#endif
  gemmW16Widen(g, transW, W, ldw, true);
}

}  // namespace sfx
