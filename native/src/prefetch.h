// Prefetching a region of memory into L2 in address order, spread over the steps of the work that runs
// meanwhile: the streaming products (gemm_bf16.cc, gemm_q8.cc) read several rows of a weight matrix side by
// side, too many short streams for the CPU's own prefetching, and fetch the next rows this way as one
// stream the memory system runs ahead on. A no-op off x86.
#pragma once
#include <algorithm>
#include <cstddef>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace sfx {

class PrefetchAhead {
 public:
  // [p, p + bytes), a share of its cache lines at each of `steps` steps (0 bytes: nothing).
  PrefetchAhead(const void* p, size_t bytes, size_t steps)
      : p_(static_cast<const char*>(p)), lines_((bytes + 63) / 64), per_((lines_ + std::max<size_t>(steps, 1) - 1) / std::max<size_t>(steps, 1)) {}

  // Prefetches step `i`'s share.
  void step(size_t i) const {
#if defined(__x86_64__) && defined(__GNUC__)
    for (size_t l = i * per_; l < std::min(lines_, (i + 1) * per_); l++) _mm_prefetch(p_ + 64 * l, _MM_HINT_T1);
#else
    (void)i;
#endif
  }

 private:
  const char* p_;
  size_t lines_, per_;
};

// The bytes rows [row0, row0 + rows) of a row-major matrix of `cols` elements of `elem` bytes (row stride
// ld elements) span, clipped to the matrix's n rows; 0 when none is left.
inline size_t rowSpanBytes(int row0, int rows, int n, int cols, size_t ld, size_t elem) {
  const int r = std::max(0, std::min(rows, n - row0));
  return r > 0 ? (static_cast<size_t>(r - 1) * ld + cols) * elem : 0;
}

}  // namespace sfx
