# The native kernel addon (src/kernels/native.ts loads build/Release/sinkflex_native.node).
# No -march flag: the binary must run on any x86-64 CPU. AVX2/AVX-512 code paths are compiled per function
# (target attributes) and chosen at run time from cpuid.
# On AArch64 the NEON kernels (src/*_neon.cc) are compiled in, guarded by __aarch64__ (empty elsewhere).
{
  "targets": [
    {
      "target_name": "sinkflex_native",
      "sources": ["src/addon.cc", "src/threadpool.cc", "src/gemm.cc", "src/gemm_neon.cc", "src/gemm_bf16.cc", "src/gemm_q8.cc", "src/ops.cc", "src/attention.cc", "src/attention_neon.cc", "src/attention_bf16.cc", "src/peak.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++20"],
      "cflags_cc": ["-std=c++17", "-O3", "-fexceptions", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-fno-semantic-interposition", "-Wno-uninitialized"],
      "ldflags": ["-pthread"],
      "cflags": ["-pthread"]
    }
  ]
}
