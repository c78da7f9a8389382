// The Node.js bindings of the native kernels: argument checking (types, sizes, ranges) and the calls
// into gemm.cc / ops.cc / attention.cc. Every call is synchronous; kernels split work across the thread
// pool internally. src/kernels/native.ts wraps these functions into the Kernels interface.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cpu.h"
#include "ftz.h"
#include "kernels.h"
#include "threadpool.h"

namespace {

struct Args {
  const Napi::CallbackInfo& info;
  const char* fn;

  [[noreturn]] void fail(const std::string& msg) const {
    throw Napi::TypeError::New(info.Env(), std::string("sinkflex native ") + fn + ": " + msg);
  }
  [[noreturn]] void range(const std::string& msg) const {
    throw Napi::RangeError::New(info.Env(), std::string("sinkflex native ") + fn + ": " + msg);
  }
  double num(size_t i, const char* name) const {
    if (!info[i].IsNumber()) fail(std::string("argument ") + name + " must be a number");
    return info[i].As<Napi::Number>().DoubleValue();
  }
  int count(size_t i, const char* name) const {
    double d = num(i, name);
    if (!(d >= 0) || d != std::floor(d) || d > 2147483647.0)
      range(std::string("argument ") + name + " must be a non-negative integer, got " + std::to_string(d));
    return static_cast<int>(d);
  }
  bool flag(size_t i) const {
    return info[i].IsBoolean() ? info[i].As<Napi::Boolean>().Value() : (info[i].IsNumber() && num(i, "flag") != 0);
  }
  bool isNull(size_t i) const { return info[i].IsNull() || info[i].IsUndefined(); }

  template <class T, napi_typedarray_type Kind>
  T* typed(size_t i, const char* name, size_t need, const char* typeName, bool nullable) const {
    if (nullable && isNull(i)) return nullptr;
    if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != Kind)
      fail(std::string("argument ") + name + " must be a " + typeName);
    auto arr = info[i].As<Napi::TypedArrayOf<T>>();
    if (arr.ElementLength() < need)
      range(std::string("argument ") + name + " has " + std::to_string(arr.ElementLength()) + " elements, needs " +
            std::to_string(need) + " for the given shape");
    return arr.Data();
  }
  float* f32(size_t i, const char* name, size_t need, bool nullable = false) const {
    return typed<float, napi_float32_array>(i, name, need, "Float32Array", nullable);
  }
  int32_t* i32(size_t i, const char* name, size_t need, bool nullable = false) const {
    return typed<int32_t, napi_int32_array>(i, name, need, "Int32Array", nullable);
  }
  uint16_t* u16(size_t i, const char* name, size_t need, bool nullable = false) const {
    return typed<uint16_t, napi_uint16_array>(i, name, need, "Uint16Array", nullable);
  }
  int8_t* i8(size_t i, const char* name, size_t need) const {
    return typed<int8_t, napi_int8_array>(i, name, need, "Int8Array", false);
  }
  uint8_t* u8(size_t i, const char* name, size_t need, bool nullable = false) const {
    return typed<uint8_t, napi_uint8_array>(i, name, need, "Uint8Array", nullable);
  }
};

// Elements a rows x cols matrix with row stride ld occupies.
size_t span(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<size_t>(rows - 1) * ld + cols;
}

Napi::Value Sgemm(const Napi::CallbackInfo& info) {
  Args a{info, "sgemm"};
  bool ta = a.flag(0), tb = a.flag(1);
  int M = a.count(2, "M"), N = a.count(3, "N"), K = a.count(4, "K");
  float alpha = static_cast<float>(a.num(5, "alpha"));
  int lda = a.count(7, "lda"), ldb = a.count(9, "ldb"), ldc = a.count(12, "ldc");
  if (lda < (ta ? M : K) && (ta ? M : K) > 0) a.range("lda is smaller than a row of the stored A");
  if (ldb < (tb ? K : N) && (tb ? K : N) > 0) a.range("ldb is smaller than a row of the stored B");
  if (ldc < N) a.range("ldc is smaller than N");
  const float* A = a.f32(6, "A", ta ? span(K, M, lda) : span(M, K, lda));
  const float* B = a.f32(8, "B", tb ? span(N, K, ldb) : span(K, N, ldb));
  float beta = static_cast<float>(a.num(10, "beta"));
  float* C = a.f32(11, "C", span(M, N, ldc));
  sfx::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return info.Env().Undefined();
}

// gemmW16(transW, M, N, K, alpha, A, lda, W (Uint16Array of bfloat16 bits), ldw, beta, C, ldc)
Napi::Value GemmW16(const Napi::CallbackInfo& info) {
  Args a{info, "gemmW16"};
  bool tw = a.flag(0);
  int M = a.count(1, "M"), N = a.count(2, "N"), K = a.count(3, "K");
  float alpha = static_cast<float>(a.num(4, "alpha"));
  int lda = a.count(6, "lda"), ldw = a.count(8, "ldw"), ldc = a.count(11, "ldc");
  if (lda < K && K > 0) a.range("lda is smaller than K");
  if (ldw < (tw ? K : N) && (tw ? K : N) > 0) a.range("ldw is smaller than a row of the stored W");
  if (ldc < N) a.range("ldc is smaller than N");
  const float* A = a.f32(5, "A", span(M, K, lda));
  const uint16_t* W = a.u16(7, "W", tw ? span(N, K, ldw) : span(K, N, ldw));
  float beta = static_cast<float>(a.num(9, "beta"));
  float* C = a.f32(10, "C", span(M, N, ldc));
  sfx::gemmW16(tw, M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
  return info.Env().Undefined();
}

// quantizeQ8(N, K, W (Float32Array, or Uint16Array of bfloat16 bits) [N, K] with row stride ldw, ldw, q (Int8Array
// [N, Kp]), scales (Float32Array [N, Kp / 32])), Kp = K rounded up to a multiple of 32 (gemm_q8.cc)
Napi::Value QuantizeQ8(const Napi::CallbackInfo& info) {
  Args a{info, "quantizeQ8"};
  int N = a.count(0, "N"), K = a.count(1, "K"), ldw = a.count(3, "ldw");
  if (ldw < K && K > 0) a.range("ldw is smaller than K");
  const bool bf16 = info[2].IsTypedArray() && info[2].As<Napi::TypedArray>().TypedArrayType() == napi_uint16_array;
  const float* wf = bf16 ? nullptr : a.f32(2, "W", span(N, K, ldw));
  const uint16_t* wb = bf16 ? a.u16(2, "W", span(N, K, ldw)) : nullptr;
  const int Kp = sfx::q8PaddedDepth(K);
  int8_t* q = a.i8(4, "q", static_cast<size_t>(N) * Kp);
  float* scales = a.f32(5, "scales", static_cast<size_t>(N) * (Kp / 32));
  sfx::quantizeQ8(N, K, wf, wb, ldw, q, scales);
  return info.Env().Undefined();
}

// gemmQ8(M, N, K, alpha, A, lda, q, scales, beta, C, ldc): C = alpha A W^T + beta C, W as quantizeQ8 wrote it
Napi::Value GemmQ8(const Napi::CallbackInfo& info) {
  Args a{info, "gemmQ8"};
  int M = a.count(0, "M"), N = a.count(1, "N"), K = a.count(2, "K");
  float alpha = static_cast<float>(a.num(3, "alpha"));
  int lda = a.count(5, "lda"), ldc = a.count(10, "ldc");
  if (lda < K && K > 0) a.range("lda is smaller than K");
  if (ldc < N) a.range("ldc is smaller than N");
  const float* A = a.f32(4, "A", span(M, K, lda));
  const int Kp = sfx::q8PaddedDepth(K);
  const int8_t* q = a.i8(6, "q", static_cast<size_t>(N) * Kp);
  const float* scales = a.f32(7, "scales", static_cast<size_t>(N) * (Kp / 32));
  float beta = static_cast<float>(a.num(8, "beta"));
  float* C = a.f32(9, "C", span(M, N, ldc));
  sfx::gemmQ8(M, N, K, alpha, A, lda, q, scales, beta, C, ldc);
  return info.Env().Undefined();
}

Napi::Value PackedWeightSize(const Napi::CallbackInfo& info) {
  Args a{info, "packedWeightSize"};
  int N = a.count(0, "N"), K = a.count(1, "K");
  return Napi::Number::New(info.Env(), static_cast<double>(sfx::packedWeightSize(N, K)));
}

Napi::Value PackWeight(const Napi::CallbackInfo& info) {
  Args a{info, "packWeight"};
  int N = a.count(0, "N"), K = a.count(1, "K"), ldw = a.count(3, "ldw");
  if (ldw < K && N > 0) a.range("ldw is smaller than K");
  const float* W = a.f32(2, "W", span(N, K, ldw));
  float* dst = a.f32(4, "packed", sfx::packedWeightSize(N, K));
  sfx::packWeight(N, K, W, ldw, dst);
  return info.Env().Undefined();
}

Napi::Value SgemmPacked(const Napi::CallbackInfo& info) {
  Args a{info, "sgemmPacked"};
  int M = a.count(0, "M"), N = a.count(1, "N"), K = a.count(2, "K");
  float alpha = static_cast<float>(a.num(3, "alpha"));
  int lda = a.count(5, "lda"), ldc = a.count(9, "ldc");
  if (lda < K && K > 0) a.range("lda is smaller than K");
  if (ldc < N) a.range("ldc is smaller than N");
  const float* A = a.f32(4, "A", span(M, K, lda));
  const float* Wp = a.f32(6, "packed", sfx::packedWeightSize(N, K));
  float beta = static_cast<float>(a.num(7, "beta"));
  float* C = a.f32(8, "C", span(M, N, ldc));
  sfx::sgemmPacked(M, N, K, alpha, A, lda, Wp, beta, C, ldc);
  return info.Env().Undefined();
}

Napi::Value Sgemv(const Napi::CallbackInfo& info) {
  Args a{info, "sgemv"};
  bool tr = a.flag(0);
  int M = a.count(1, "M"), N = a.count(2, "N");
  float alpha = static_cast<float>(a.num(3, "alpha"));
  int lda = a.count(5, "lda");
  if (lda < N && M > 0) a.range("lda is smaller than N");
  const float* A = a.f32(4, "A", span(M, N, lda));
  const float* x = a.f32(6, "x", tr ? M : N);
  float beta = static_cast<float>(a.num(7, "beta"));
  float* y = a.f32(8, "y", tr ? N : M);
  sfx::sgemv(tr, M, N, alpha, A, lda, x, beta, y);
  return info.Env().Undefined();
}

Napi::Value Axpy(const Napi::CallbackInfo& info) {
  Args a{info, "axpy"};
  int n = a.count(0, "n");
  float alpha = static_cast<float>(a.num(1, "alpha"));
  sfx::axpy(n, alpha, a.f32(2, "x", n), a.f32(3, "y", n));
  return info.Env().Undefined();
}

Napi::Value Scale(const Napi::CallbackInfo& info) {
  Args a{info, "scale"};
  int n = a.count(0, "n");
  sfx::scale(n, static_cast<float>(a.num(1, "alpha")), a.f32(2, "x", n));
  return info.Env().Undefined();
}

Napi::Value Add(const Napi::CallbackInfo& info) {
  Args a{info, "add"};
  int n = a.count(0, "n");
  sfx::add(n, a.f32(1, "a", n), a.f32(2, "b", n), a.f32(3, "out", n));
  return info.Env().Undefined();
}

Napi::Value SumSquares(const Napi::CallbackInfo& info) {
  Args a{info, "sumSquares"};
  int n = a.count(0, "n");
  return Napi::Number::New(info.Env(), sfx::sumSquares(n, a.f32(1, "x", n)));
}

Napi::Value AddBias(const Napi::CallbackInfo& info) {
  Args a{info, "addBias"};
  int N = a.count(0, "N"), C = a.count(1, "C");
  sfx::addBias(N, C, a.f32(2, "x", static_cast<size_t>(N) * C), a.f32(3, "bias", C));
  return info.Env().Undefined();
}

Napi::Value BiasBackward(const Napi::CallbackInfo& info) {
  Args a{info, "biasBackward"};
  int N = a.count(0, "N"), C = a.count(1, "C");
  sfx::biasBackward(N, C, a.f32(2, "dY", static_cast<size_t>(N) * C), a.f32(3, "dBias", C));
  return info.Env().Undefined();
}

const int32_t* checkedIds(const Args& a, size_t i, int N, int V) {
  const int32_t* ids = a.i32(i, "ids", N);
  for (int n = 0; n < N; n++)
    if (ids[n] < 0 || ids[n] >= V)
      a.range("token id " + std::to_string(ids[n]) + " at row " + std::to_string(n) + " is outside [0, " +
              std::to_string(V) + "); check the tokenizer and vocabulary size");
  return ids;
}

Napi::Value EmbeddingForward(const Napi::CallbackInfo& info) {
  Args a{info, "embeddingForward"};
  int N = a.count(0, "N"), C = a.count(1, "C"), V = a.count(2, "V");
  const int32_t* ids = checkedIds(a, 3, N, V);
  sfx::embeddingForward(N, C, ids, a.f32(4, "table", static_cast<size_t>(V) * C),
                        a.f32(5, "out", static_cast<size_t>(N) * C));
  return info.Env().Undefined();
}

Napi::Value EmbeddingBackward(const Napi::CallbackInfo& info) {
  Args a{info, "embeddingBackward"};
  int N = a.count(0, "N"), C = a.count(1, "C"), V = a.count(2, "V");
  const int32_t* ids = checkedIds(a, 3, N, V);
  sfx::embeddingBackward(N, C, ids, a.f32(4, "dOut", static_cast<size_t>(N) * C),
                         a.f32(5, "dTable", static_cast<size_t>(V) * C));
  return info.Env().Undefined();
}

Napi::Value RmsnormForward(const Napi::CallbackInfo& info) {
  Args a{info, "rmsnormForward"};
  int N = a.count(0, "N"), C = a.count(1, "C");
  float eps = static_cast<float>(a.num(2, "eps"));
  size_t nc = static_cast<size_t>(N) * C;
  sfx::rmsnormForward(N, C, eps, a.f32(3, "x", nc), a.f32(4, "weight", C), a.f32(5, "out", nc), a.f32(6, "rstd", N));
  return info.Env().Undefined();
}

Napi::Value RmsnormBackward(const Napi::CallbackInfo& info) {
  Args a{info, "rmsnormBackward"};
  int N = a.count(0, "N"), C = a.count(1, "C");
  size_t nc = static_cast<size_t>(N) * C;
  sfx::rmsnormBackward(N, C, a.f32(2, "dOut", nc), a.f32(3, "x", nc), a.f32(4, "weight", C), a.f32(5, "rstd", N),
                       a.f32(6, "dX", nc), a.f32(7, "dWeight", C));
  return info.Env().Undefined();
}

Napi::Value Rope(const Napi::CallbackInfo& info) {
  Args a{info, "rope"};
  int N = a.count(0, "N"), H = a.count(1, "H"), D = a.count(2, "D");
  if (D % 2) a.range("D must be even");
  const int32_t* pos = a.i32(3, "positions", N);
  const float* cosT = a.f32(4, "cos", 0);
  const float* sinT = a.f32(5, "sin", 0);
  size_t tableLen =
      std::min(info[4].As<Napi::TypedArray>().ElementLength(), info[5].As<Napi::TypedArray>().ElementLength());
  for (int n = 0; n < N; n++)
    if (pos[n] < 0 || static_cast<size_t>(pos[n] + 1) * (D / 2) > tableLen)
      a.range("position " + std::to_string(pos[n]) + " at row " + std::to_string(n) +
              " is outside the cos/sin tables; build them for the longest sequence");
  float* x = a.f32(6, "x", static_cast<size_t>(N) * H * D);
  sfx::rope(N, H, D, pos, cosT, sinT, x, a.flag(7));
  return info.Env().Undefined();
}

Napi::Value SwigluForward(const Napi::CallbackInfo& info) {
  Args a{info, "swigluForward"};
  int n = a.count(0, "n");
  sfx::swigluForward(n, a.f32(1, "gate", n), a.f32(2, "up", n), a.f32(3, "out", n));
  return info.Env().Undefined();
}

Napi::Value SwigluBackward(const Napi::CallbackInfo& info) {
  Args a{info, "swigluBackward"};
  int n = a.count(0, "n");
  sfx::swigluBackward(n, a.f32(1, "dOut", n), a.f32(2, "gate", n), a.f32(3, "up", n), a.f32(4, "dGate", n),
                      a.f32(5, "dUp", n));
  return info.Env().Undefined();
}

Napi::Value SoftmaxRows(const Napi::CallbackInfo& info) {
  Args a{info, "softmaxRows"};
  int N = a.count(0, "N"), V = a.count(1, "V");
  double temp = a.num(2, "temperature");
  if (!(temp > 0)) a.range("temperature must be > 0 (use argmax for greedy decoding)");
  size_t nv = static_cast<size_t>(N) * V;
  sfx::softmaxRows(N, V, static_cast<float>(temp), a.f32(3, "x", nv), a.f32(4, "out", nv), a.flag(5));
  return info.Env().Undefined();
}

const int32_t* checkedTargets(const Args& a, size_t i, int N, int V) {
  const int32_t* t = a.i32(i, "targets", N);
  for (int n = 0; n < N; n++)
    if (t[n] >= V) a.range("target " + std::to_string(t[n]) + " at row " + std::to_string(n) + " is >= V = " + std::to_string(V));
  return t;
}

Napi::Value LogprobsForward(const Napi::CallbackInfo& info) {
  Args a{info, "logprobsForward"};
  int N = a.count(0, "N"), V = a.count(1, "V");
  const float* logits = a.f32(2, "logits", static_cast<size_t>(N) * V);
  const int32_t* t = checkedTargets(a, 3, N, V);
  sfx::logprobsForward(N, V, logits, t, a.f32(4, "logprob", N), a.f32(5, "lse", N));
  return info.Env().Undefined();
}

Napi::Value LogprobsBackward(const Napi::CallbackInfo& info) {
  Args a{info, "logprobsBackward"};
  int N = a.count(0, "N"), V = a.count(1, "V");
  size_t nv = static_cast<size_t>(N) * V;
  const float* logits = a.f32(2, "logits", nv);
  const int32_t* t = checkedTargets(a, 3, N, V);
  sfx::logprobsBackward(N, V, logits, t, a.f32(4, "lse", N), a.f32(5, "dLogprob", N), a.f32(6, "dLogits", nv));
  return info.Env().Undefined();
}

Napi::Value AdamwUpdate(const Napi::CallbackInfo& info) {
  Args a{info, "adamwUpdate"};
  int n = a.count(0, "n");
  float* p = a.f32(1, "param", n);
  const float* g = a.f32(2, "grad", n);
  float* m = a.f32(3, "m", n);
  float* v = a.f32(4, "v", n);
  int step = a.count(10, "step");
  if (step < 1) a.range("step counts from 1");
  sfx::adamwUpdate(n, p, g, m, v, static_cast<float>(a.num(5, "lr")), static_cast<float>(a.num(6, "beta1")),
                   static_cast<float>(a.num(7, "beta2")), static_cast<float>(a.num(8, "eps")),
                   static_cast<float>(a.num(9, "weightDecay")), step, static_cast<float>(a.num(11, "gradScale")));
  return info.Env().Undefined();
}

// (B, T, H, KVH, D, scale, window, sinks, docIds, pinned, ...) common to forward and backward
struct AttnCommon {
  sfx::AttnShape shape;
  sfx::AttnMask mask;
};

AttnCommon attnCommon(const Args& a) {
  AttnCommon c{};
  c.shape.B = a.count(0, "B");
  c.shape.T = a.count(1, "T");
  c.shape.H = a.count(2, "H");
  c.shape.KVH = a.count(3, "KVH");
  c.shape.D = a.count(4, "D");
  c.shape.scale = static_cast<float>(a.num(5, "scale"));
  if (c.shape.KVH == 0 || c.shape.H % c.shape.KVH) a.range("H must be a multiple of KVH (and KVH > 0)");
  double w = a.num(6, "window");
  c.mask.window = (w > 0 && std::isfinite(w) && w < 2147483647.0) ? static_cast<int>(w) : 0;
  c.mask.sinks = a.count(7, "sinks");
  size_t bt = static_cast<size_t>(c.shape.B) * c.shape.T;
  c.mask.docIds = a.i32(8, "docIds", bt, true);
  c.mask.pinned = a.u8(9, "pinned", bt, true);
  return c;
}

Napi::Value AttentionForward(const Napi::CallbackInfo& info) {
  Args a{info, "attentionForward"};
  AttnCommon c = attnCommon(a);
  auto& s = c.shape;
  size_t qn = static_cast<size_t>(s.B) * s.T * s.H * s.D, kn = static_cast<size_t>(s.B) * s.T * s.KVH * s.D;
  sfx::attentionForward(s, c.mask, a.f32(10, "q", qn), a.f32(11, "k", kn), a.f32(12, "v", kn),
                        a.f32(13, "sinkLogit", s.H, true), a.f32(14, "out", qn),
                        a.f32(15, "lse", static_cast<size_t>(s.B) * s.T * s.H));
  return info.Env().Undefined();
}

Napi::Value AttentionBackward(const Napi::CallbackInfo& info) {
  Args a{info, "attentionBackward"};
  AttnCommon c = attnCommon(a);
  auto& s = c.shape;
  size_t qn = static_cast<size_t>(s.B) * s.T * s.H * s.D, kn = static_cast<size_t>(s.B) * s.T * s.KVH * s.D;
  const float* sink = a.f32(13, "sinkLogit", s.H, true);
  sfx::attentionBackward(s, c.mask, a.f32(10, "q", qn), a.f32(11, "k", kn), a.f32(12, "v", kn), sink,
                         a.f32(14, "out", qn), a.f32(15, "lse", static_cast<size_t>(s.B) * s.T * s.H),
                         a.f32(16, "dOut", qn), a.f32(17, "dQ", qn), a.f32(18, "dK", kn), a.f32(19, "dV", kn),
                         a.f32(20, "dSinkLogit", s.H, true));
  return info.Env().Undefined();
}

// (B, Tq, H, KVH, D, scale, blockSize, maxBlocks, window, sinks, q, kCache, vCache, blockTable, seqLens, sink, out,
//  pinStart, pinCount, pinPositions): the last three null (or absent) = no pinned entries
Napi::Value AttentionCached(const Napi::CallbackInfo& info) {
  Args a{info, "attentionCached"};
  sfx::CachedShape s{};
  s.B = a.count(0, "B");
  s.Tq = a.count(1, "Tq");
  s.H = a.count(2, "H");
  s.KVH = a.count(3, "KVH");
  s.D = a.count(4, "D");
  s.scale = static_cast<float>(a.num(5, "scale"));
  s.blockSize = a.count(6, "blockSize");
  s.maxBlocks = a.count(7, "maxBlocks");
  if (s.KVH == 0 || s.H % s.KVH) a.range("H must be a multiple of KVH (and KVH > 0)");
  if (s.blockSize == 0) a.range("blockSize must be > 0");
  double w = a.num(8, "window");
  int window = (w > 0 && std::isfinite(w) && w < 2147483647.0) ? static_cast<int>(w) : 0;
  int sinks = a.count(9, "sinks");
  size_t qn = static_cast<size_t>(s.B) * s.Tq * s.H * s.D;
  const float* q = a.f32(10, "q", qn);
  const float* kc = a.f32(11, "kCache", 0);
  const float* vc = a.f32(12, "vCache", 0);
  size_t cacheLen =
      std::min(info[11].As<Napi::TypedArray>().ElementLength(), info[12].As<Napi::TypedArray>().ElementLength());
  size_t blockElems = static_cast<size_t>(s.blockSize) * s.KVH * s.D;
  const int32_t* table = a.i32(13, "blockTable", static_cast<size_t>(s.B) * s.maxBlocks);
  const int32_t* lens = a.i32(14, "seqLens", s.B);
  for (int b = 0; b < s.B; b++) {
    if (lens[b] < s.Tq || lens[b] > s.maxBlocks * s.blockSize)
      a.range("seqLens[" + std::to_string(b) + "] = " + std::to_string(lens[b]) + " must be in [Tq, maxBlocks * blockSize]");
    int used = (lens[b] + s.blockSize - 1) / s.blockSize;
    for (int j = 0; j < used; j++) {
      int blk = table[static_cast<size_t>(b) * s.maxBlocks + j];
      if (blk < 0 || static_cast<size_t>(blk + 1) * blockElems > cacheLen)
        a.range("blockTable[" + std::to_string(b) + ", " + std::to_string(j) + "] = " + std::to_string(blk) +
                " is outside the cache");
    }
  }
  sfx::CachedPinned pin{};
  const bool hasPin = info.Length() > 17 && !a.isNull(17);
  if (hasPin) {
    pin.start = a.i32(17, "pinStart", s.B);
    pin.count = a.i32(18, "pinCount", s.B);
    size_t total = info[19].IsTypedArray() ? info[19].As<Napi::TypedArray>().ElementLength() : 0;
    pin.positions = a.i32(19, "pinPositions", 0);
    for (int b = 0; b < s.B; b++) {
      if (pin.start[b] < 0 || pin.count[b] < 0 || static_cast<size_t>(pin.start[b]) + pin.count[b] > total)
        a.range("pinned entries of sequence " + std::to_string(b) + " (start " + std::to_string(pin.start[b]) +
                ", count " + std::to_string(pin.count[b]) + ") are outside pinPositions (" + std::to_string(total) + ")");
      const int32_t* p = pin.positions + pin.start[b];
      for (int i = 0; i < pin.count[b]; i++)
        if (p[i] < 0 || p[i] >= lens[b] || (i > 0 && p[i] <= p[i - 1]))
          a.range("pinPositions of sequence " + std::to_string(b) + " must ascend within [0, seqLens[b]); got " +
                  std::to_string(p[i]) + " at index " + std::to_string(i));
    }
  }
  sfx::attentionCached(s, window, sinks, q, kc, vc, table, lens, a.f32(15, "sinkLogit", s.H, true),
                       a.f32(16, "out", qn), hasPin ? &pin : nullptr);
  return info.Env().Undefined();
}

Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("simd", sfx::simdName(sfx::simdLevel()));
  o.Set("threads", sfx::poolThreads());
  o.Set("bf16Unit", sfx::bf16UnitName(sfx::bf16Unit()));
  o.Set("matmul", sfx::matmulPrecision() == sfx::MatmulPrecision::Bf16 ? "bf16" : "fp32");
  return o;
}
// setMatmulPrecision("fp32" | "bf16"): returns the precision in effect ("fp32" where the CPU has no bf16 unit).
Napi::Value SetMatmulPrecision(const Napi::CallbackInfo& info) {
  Args a{info, "setMatmulPrecision"};
  if (!info[0].IsString()) a.fail("argument precision must be \"fp32\" or \"bf16\"");
  const std::string p = info[0].As<Napi::String>().Utf8Value();
  if (p != "fp32" && p != "bf16") a.range("precision must be \"fp32\" or \"bf16\", got \"" + p + "\"");
  const auto now = sfx::setMatmulPrecision(p == "bf16" ? sfx::MatmulPrecision::Bf16 : sfx::MatmulPrecision::Fp32);
  return Napi::String::New(info.Env(), now == sfx::MatmulPrecision::Bf16 ? "bf16" : "fp32");
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  Args a{info, "setThreads"};
  int n = a.count(0, "n");
  if (n < 1) a.range("n must be >= 1");
  sfx::setPoolThreads(n);
  return info.Env().Undefined();
}

Napi::Value PeakGflops(const Napi::CallbackInfo& info) {
  Args a{info, "peakGflops"};
  return Napi::Number::New(info.Env(), sfx::peakGflops(a.num(0, "seconds"), a.count(1, "threads")));
}

/** Runs a binding with flush-to-zero set on the calling thread for the call (see ftz.h). */
template <Napi::Value (*F)(const Napi::CallbackInfo&)>
Napi::Value WithFlushToZero(const Napi::CallbackInfo& info) {
  sfx::FlushToZero scope;
  return F(info);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("sgemm", Napi::Function::New(env, WithFlushToZero<Sgemm>));
  exports.Set("sgemv", Napi::Function::New(env, WithFlushToZero<Sgemv>));
  exports.Set("gemmW16", Napi::Function::New(env, WithFlushToZero<GemmW16>));
  exports.Set("quantizeQ8", Napi::Function::New(env, WithFlushToZero<QuantizeQ8>));
  exports.Set("gemmQ8", Napi::Function::New(env, WithFlushToZero<GemmQ8>));
  exports.Set("packedWeightSize", Napi::Function::New(env, WithFlushToZero<PackedWeightSize>));
  exports.Set("packWeight", Napi::Function::New(env, WithFlushToZero<PackWeight>));
  exports.Set("sgemmPacked", Napi::Function::New(env, WithFlushToZero<SgemmPacked>));
  exports.Set("axpy", Napi::Function::New(env, WithFlushToZero<Axpy>));
  exports.Set("scale", Napi::Function::New(env, WithFlushToZero<Scale>));
  exports.Set("add", Napi::Function::New(env, WithFlushToZero<Add>));
  exports.Set("sumSquares", Napi::Function::New(env, WithFlushToZero<SumSquares>));
  exports.Set("addBias", Napi::Function::New(env, WithFlushToZero<AddBias>));
  exports.Set("biasBackward", Napi::Function::New(env, WithFlushToZero<BiasBackward>));
  exports.Set("embeddingForward", Napi::Function::New(env, WithFlushToZero<EmbeddingForward>));
  exports.Set("embeddingBackward", Napi::Function::New(env, WithFlushToZero<EmbeddingBackward>));
  exports.Set("rmsnormForward", Napi::Function::New(env, WithFlushToZero<RmsnormForward>));
  exports.Set("rmsnormBackward", Napi::Function::New(env, WithFlushToZero<RmsnormBackward>));
  exports.Set("rope", Napi::Function::New(env, WithFlushToZero<Rope>));
  exports.Set("swigluForward", Napi::Function::New(env, WithFlushToZero<SwigluForward>));
  exports.Set("swigluBackward", Napi::Function::New(env, WithFlushToZero<SwigluBackward>));
  exports.Set("softmaxRows", Napi::Function::New(env, WithFlushToZero<SoftmaxRows>));
  exports.Set("logprobsForward", Napi::Function::New(env, WithFlushToZero<LogprobsForward>));
  exports.Set("logprobsBackward", Napi::Function::New(env, WithFlushToZero<LogprobsBackward>));
  exports.Set("adamwUpdate", Napi::Function::New(env, WithFlushToZero<AdamwUpdate>));
  exports.Set("attentionForward", Napi::Function::New(env, WithFlushToZero<AttentionForward>));
  exports.Set("attentionBackward", Napi::Function::New(env, WithFlushToZero<AttentionBackward>));
  exports.Set("attentionCached", Napi::Function::New(env, WithFlushToZero<AttentionCached>));
  exports.Set("info", Napi::Function::New(env, WithFlushToZero<Info>));
  exports.Set("peakGflops", Napi::Function::New(env, WithFlushToZero<PeakGflops>));
  exports.Set("setThreads", Napi::Function::New(env, WithFlushToZero<SetThreads>));
  exports.Set("setMatmulPrecision", Napi::Function::New(env, WithFlushToZero<SetMatmulPrecision>));
  return exports;
}

}  // namespace

NODE_API_MODULE(sinkflex_native, Init)
