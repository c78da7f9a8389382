// The canonical attention mask as the training kernels evaluate it: attention.cc defines these, the fp32
// kernels there and the bf16 ones (attention_bf16.cc) use them. The mask's meaning is defined in
// src/kernels/kernels.ts.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels.h"

namespace sfx {

// Document id of a shared prefix: positions with it (at the start of a batch row) are kept by every later
// query of the row, as if each document after them were the prefix followed by that document.
constexpr int32_t kSharedDoc = -1;

// The most queries a block of the training kernels holds.
constexpr int kQBlock = 64;

// For each position, its index within its document, counting a shared prefix: a prefix position keeps its
// own index t; a document position is P + (t - start of its run of equal ids), P = the row's prefix length.
std::vector<int32_t> docPositions(int B, int T, const int32_t* docIds);

// The canonical mask for batch row b.
struct MaskCtx {
  const AttnMask& m;
  int T;
  const int32_t* docPos;  // docPositions()
  int b;
  bool keep(int q, int j) const {
    if (j > q) return false;
    const size_t row = static_cast<size_t>(b) * T;
    if (m.docIds && m.docIds[row + q] != m.docIds[row + j] && m.docIds[row + j] != kSharedDoc) return false;
    if (m.window <= 0 || docPos[row + q] - docPos[row + j] < m.window) return true;
    if (docPos[row + j] < m.sinks) return true;
    return m.pinned && m.pinned[row + j];
  }
};

// The kv positions that at least one query of [t0, t1) keeps, ascending (t1 - t0 <= kQBlock).
void blockColumns(const MaskCtx& c, int t0, int t1, std::vector<int>& cols);

// A block's columns as arrays, to evaluate MaskCtx::keep a query row at a time over them (so that it
// vectorizes): query q (document dq, index pq in it) keeps column c where pos[c] <= q, doc[c] is dq or the
// shared prefix, and far[c] (a sink slot or pinned, or no window) or pq - docPos[c] < window. Columns past
// cols, up to padTo, keep nothing.
struct ColumnFacts {
  std::vector<int32_t> pos, doc, docPos, far;
  void of(const MaskCtx& mc, const std::vector<int>& cols, int padTo);
};

// The backward's work split: tasks over (batch row, kv head, share of the query blocks), so that no two
// write the same gradient rows. block(mc, kvh, t0, t1, dKb, dVb, stride, sinkPart) computes the query
// block [t0, t1) of kv head kvh of row mc.b: it writes dQ's rows of the block and adds into dK / dV rows
// j at dKb / dVb + j * stride (the kv head's part of row mc.b, or a private buffer added afterwards) and
// into sinkPart[h] (its share of dSinkLogit[h]). dK and dV are zeroed first; dSinkLogit (null: none) gets
// the shares added.
using BackwardBlock = std::function<void(const MaskCtx& mc, int kvh, int t0, int t1, float* dKb, float* dVb,
                                         size_t stride, float* sinkPart)>;
void backwardTasks(const AttnShape& s, const AttnMask& m, float* dK, float* dV, float* dSinkLogit,
                   const BackwardBlock& block);

// The training kernels with bf16 products on AVX512-BF16 (attention_bf16.cc): they return false, having
// done nothing, where they do not apply (no such unit, or a head size that is not a multiple of 32 up to 128).
bool attentionForwardBf16(const AttnShape& s, const AttnMask& m, const float* q, const float* k, const float* v,
                          const float* sinkLogit, float* out, float* lse);
bool attentionBackwardBf16(const AttnShape& s, const AttnMask& m, const float* q, const float* k, const float* v,
                           const float* sinkLogit, const float* out, const float* lse, const float* dOut, float* dQ,
                           float* dK, float* dV, float* dSinkLogit);

}  // namespace sfx
