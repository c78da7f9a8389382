// The operands of one product C = alpha op(A) op(B) + beta C, as the GEMM files (gemm.cc, gemm_bf16.cc)
// pass them between their packing and compute steps. Row-major; lda, ldb, ldc are row strides.
#pragma once

namespace sfx {

struct GemmArgs {
  bool ta, tb;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
};

}  // namespace sfx
