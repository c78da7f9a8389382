// The AArch64 NEON parts of decoding attention (attention_neon.cc): the score pass and the value pass of
// one new token against its kept cache rows, for the G query heads of one kv head. attention.cc's
// attentionCached calls them (with its softmax between) when simdLevel() is Neon and the head size is a
// multiple of 4. Declared only on AArch64; not the mask, the softmax or the training kernels.
#pragma once

#if defined(__aarch64__)
#include <cstddef>

namespace sfx {

// s[g * n + j] = scale * (q_g . k_j) for the G heads of q [G, D] and the n key rows k_j at kBase + rowOff[j].
void decodeScoresNeon(int G, int D, int n, float scale, const float* q, const float* kBase, const size_t* rowOff,
                      float* s);

// out[g] = sum_j s[g * n + j] * v_j for the G heads (out [G, D]) and the n value rows v_j at vBase + rowOff[j].
void decodeValuesNeon(int G, int D, int n, const float* s, const float* vBase, const size_t* rowOff, float* out);

}  // namespace sfx
#endif
