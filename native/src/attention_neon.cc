// Decoding attention's NEON code for AArch64 (Apple Silicon, Graviton): one new token per sequence against
// its kept cache rows, for the G query heads of one kv head, as attention.cc's AVX2 kernel does it. Scores:
// eight key rows at a time, eight independent dot products (so the FMAs do not wait on each other) reduced
// together with pairwise adds. Values: the outputs of two heads, 32 columns at a time, held in registers
// over one pass of the value rows. Head sizes that are multiples of 4 (attention.cc keeps its portable
// loop for the rest). NEON is part of every AArch64 CPU: no run-time check.
// Not here: which rows are kept (the mask), the softmax, training attention (attention.cc: small GEMMs).
#include "attention_neon.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>

namespace sfx {

void decodeScoresNeon(int G, int D, int n, float scale, const float* q, const float* kBase, const size_t* rowOff,
                      float* s) {
  const int DV = D / 4;
  const float32x4_t vscale = vdupq_n_f32(scale);
  for (int g = 0; g < G; g++) {
    const float* qg = q + static_cast<size_t>(g) * D;
    float* sg = s + static_cast<size_t>(g) * n;
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      const float* kr[8];
      float32x4_t acc[8];
      const float32x4_t q0 = vld1q_f32(qg);
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) {
        kr[t] = kBase + rowOff[j + t];
        acc[t] = vmulq_f32(q0, vld1q_f32(kr[t]));
      }
      for (int c = 1; c < DV; c++) {
        const float32x4_t qc = vld1q_f32(qg + 4 * c);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) acc[t] = vfmaq_f32(acc[t], qc, vld1q_f32(kr[t] + 4 * c));
      }
      // lane t of lo (hi): the sum of the four lanes of acc[t] (acc[4 + t])
      const float32x4_t lo = vpaddq_f32(vpaddq_f32(acc[0], acc[1]), vpaddq_f32(acc[2], acc[3]));
      const float32x4_t hi = vpaddq_f32(vpaddq_f32(acc[4], acc[5]), vpaddq_f32(acc[6], acc[7]));
      vst1q_f32(sg + j, vmulq_f32(lo, vscale));
      vst1q_f32(sg + j + 4, vmulq_f32(hi, vscale));
    }
    for (; j < n; j++) {
      const float* kr = kBase + rowOff[j];
      float32x4_t a = vmulq_f32(vld1q_f32(qg), vld1q_f32(kr));
      for (int c = 1; c < DV; c++) a = vfmaq_f32(a, vld1q_f32(qg + 4 * c), vld1q_f32(kr + 4 * c));
      sg[j] = vaddvq_f32(a) * scale;
    }
  }
}

// out[g] = sum_j s[g * ldS + j] * v_j over columns [0, 4 * CW) of the rows (vBase already at the columns'
// start) for GB heads at once: GB x CW accumulators held in registers over one pass of the rows.
template <int CW, int GB>
static inline void decodeValueColumns(int n, const float* s, int ldS, const float* vBase, const size_t* rowOff,
                                      float* out, int D) {
  // One flat array, its loops unrolled: with o[GB][CW] GCC kept a copy in memory and stored all the
  // accumulators on every row.
  float32x4_t o[GB * CW];
#pragma GCC unroll 16
  for (int i = 0; i < GB * CW; i++) o[i] = vdupq_n_f32(0.f);
  for (int j = 0; j < n; j++) {
    const float* vr = vBase + rowOff[j];
#pragma GCC unroll 16
    for (int i = 0; i < GB * CW; i++) {
      const int g = i / CW, c = i % CW;
      o[i] = vfmaq_n_f32(o[i], vld1q_f32(vr + 4 * c), s[static_cast<size_t>(g) * ldS + j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < GB * CW; i++) vst1q_f32(out + static_cast<size_t>(i / CW) * D + 4 * (i % CW), o[i]);
}

// The value pass for GB heads, in column groups of at most 8 four-float chunks (GB x 8 accumulators).
template <int GB>
static void decodeValueHeads(int n, const float* s, int ldS, const float* vBase, const size_t* rowOff, float* out,
                             int D) {
  const int DV = D / 4;
  for (int c0 = 0; c0 < DV; c0 += 8) {
    const float* vb = vBase + 4 * c0;
    float* ob = out + 4 * c0;
    switch (std::min(8, DV - c0)) {
      case 1: decodeValueColumns<1, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 2: decodeValueColumns<2, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 3: decodeValueColumns<3, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 4: decodeValueColumns<4, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 5: decodeValueColumns<5, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 6: decodeValueColumns<6, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      case 7: decodeValueColumns<7, GB>(n, s, ldS, vb, rowOff, ob, D); break;
      default: decodeValueColumns<8, GB>(n, s, ldS, vb, rowOff, ob, D); break;
    }
  }
}

void decodeValuesNeon(int G, int D, int n, const float* s, const float* vBase, const size_t* rowOff, float* out) {
  int g = 0;
  for (; g + 2 <= G; g += 2)
    decodeValueHeads<2>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D);
  for (; g < G; g++)
    decodeValueHeads<1>(n, s + static_cast<size_t>(g) * n, n, vBase, rowOff, out + static_cast<size_t>(g) * D, D);
}

}  // namespace sfx
#endif
