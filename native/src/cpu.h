// Which SIMD level this CPU runs, read once from cpuid (and the OS's saved-register support).
// SINKFLEX_SIMD=portable|avx2|avx512 lowers it (never raises it above what the CPU has).
#pragma once

namespace sfx {

enum class Simd { Portable = 0, Avx2 = 1, Avx512 = 2 };

Simd simdLevel();
const char* simdName(Simd s);

}  // namespace sfx
