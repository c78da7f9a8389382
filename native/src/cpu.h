// Which SIMD level this CPU runs, read once from cpuid (and the OS's saved-register support); on AArch64
// always NEON, which every AArch64 CPU has.
// SINKFLEX_SIMD=portable|avx2|avx512 lowers it (never raises it above what the CPU has; on AArch64 only
// portable applies).
#pragma once

namespace sfx {

enum class Simd { Portable = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

Simd simdLevel();
const char* simdName(Simd s);

}  // namespace sfx
