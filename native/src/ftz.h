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
#elif defined(__aarch64__)
  FlushToZero() : saved_(__builtin_aarch64_get_fpcr()) { __builtin_aarch64_set_fpcr(saved_ | kFz); }
  ~FlushToZero() { __builtin_aarch64_set_fpcr(saved_); }
  static void setForThread() { __builtin_aarch64_set_fpcr(__builtin_aarch64_get_fpcr() | kFz); }

 private:
  static constexpr unsigned kFz = 1u << 24;  // FPCR.FZ: denormal inputs and results are flushed to zero
  unsigned saved_;
#else
  FlushToZero() {}
  static void setForThread() {}
#endif
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;
};

}  // namespace sfx
