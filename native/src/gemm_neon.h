// The AArch64 NEON parts of the fp32 GEMM (gemm_neon.cc): the 8 x 12 micro-kernel, the packing of A
// into its 8-row slivers and of a transposed B into 12-column strips, and sgemv's row dot products.
// gemm.cc's driver calls them when simdLevel() is Neon (every AArch64 CPU, unless SINKFLEX_SIMD=portable).
// Declared only on AArch64; not the blocking, the threading or the x86 kernels.
#pragma once

#if defined(__aarch64__)
#include <cstddef>

#include "gemm_args.h"

namespace sfx {

constexpr int kNeonMR = 8, kNeonNR = 12;

// C[0:mr, 0:nr] = beta * C + Ap^T Bp over kc: Ap an 8 x kc sliver stored k-major (Ap[k * 8 + i]), Bp a
// kc x 12 strip (Bp[k * 12 + j]); mr < 8 or nr < 12 marks an edge tile (only the valid part is written).
void microNeon(int kc, const float* Ap, const float* Bp, float* C, int ldc, float beta, int mr, int nr);

// Transposes 4 rows (src, src + ld, ...) of kc floats into kc groups of 4 (times alpha), group p at
// dst + p * ostride: 4 rows of a row-major A into a sliver (ostride 8), or 4 columns of a B stored
// transposed ([N, K]) into a strip (ostride 12).
void packRows4Neon(const float* src, size_t ld, int kc, float alpha, float* dst, int ostride);

// Packs the full 8-row slivers of op(A)[i0:i0+mc, p0:p0+kc] * alpha k-major (Ap[s * kc + p * 8 + i]) and
// returns how many rows it packed (mc rounded down to 8); the driver packs the rest.
int packANeon(const GemmArgs& g, int i0, int mc, int p0, int kc, float* Ap);

// sgemv's y = alpha A x + beta y for the rows [i0, i1) of A [M, N] (row stride lda): one dot product per row,
// in four independent vector sums (a row's value does not depend on which rows share its call).
void gemvRowsNeon(int i0, int i1, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y);

}  // namespace sfx
#endif
