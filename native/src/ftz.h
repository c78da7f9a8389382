// Flush-to-zero for the kernels' float math. Values below float's normal range (about 1e-38: softmax
// weights of keys far below a row's maximum, Adam's second moments of rarely used rows) are otherwise
// "denormal", and x86 cores take a slow microcode path for each operation on one, tens to hundreds of
// times slower than normal math. A training run whose attention sharpens makes more of them as it goes
// and slows down step after step. With FTZ and DAZ set, such values are read and written as 0.
//
// The pool's worker threads set the flags for good; on the calling (JavaScript) thread they are set for
// one native call and put back after it, so the JavaScript engine's own arithmetic is never affected.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace sfx {

class FlushToZero {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushToZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~FlushToZero() { _mm_setcsr(saved_); }
  /** Sets the flags on this thread for good (worker threads). */
  static void setForThread() { _mm_setcsr(_mm_getcsr() | kFtzDaz); }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bit 15 (flush to zero) and bit 6 (denormals are zero)
  unsigned saved_;
#else
  static void setForThread() {}
#endif
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;
};

}  // namespace sfx
