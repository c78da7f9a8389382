/**
 * The native kernels against the reference kernels, across shapes (odd sizes, transposes, strides,
 * subarray views, alpha/beta, masks), on the SIMD level this CPU runs; plus the lower SIMD levels in
 * subprocesses and the kernel selection rules.
 */
import { spawnSync } from "node:child_process";
import { describe as vitestDescribe, expect, it } from "vitest";
import { getKernels } from "../../src/kernels/index.js";
import type { AttentionMask, AttentionShape, Kernels } from "../../src/kernels/kernels.js";
import { loadNativeKernels, nativeAddonPath, nativeLoadError } from "../../src/kernels/native.js";
import { referenceKernels as ref } from "../../src/kernels/reference.js";
import { expectClose, randn, rng } from "./helpers.js";

const native = loadNativeKernels();
// A build that skipped the addon on purpose skips these tests; a missing addon otherwise fails them.
const skipped = !native && process.env.SINKFLEX_SKIP_NATIVE === "1";
if (!native && !skipped) throw new Error(`the native kernel tests need the addon: ${nativeLoadError()}`);
const nat: Kernels = native ?? ref;
const describe = skipped ? vitestDescribe.skip : vitestDescribe;

function gemmCase(
  k: Kernels, ta: boolean, tb: boolean, M: number, N: number, K: number, alpha: number, beta: number,
  seed: number, pad = 0,
): Float32Array {
  const r = rng(seed);
  const lda = (ta ? M : K) + pad;
  const ldb = (tb ? K : N) + pad;
  const ldc = N + pad;
  // operands live inside larger buffers at an offset, as subarray views
  const A = randn(r, 5 + (ta ? K : M) * lda).subarray(5);
  const B = randn(r, 3 + (tb ? N : K) * ldb).subarray(3);
  const C = randn(r, 7 + M * ldc).subarray(7);
  if (beta === 0) C.fill(NaN);
  k.sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const out = new Float32Array(M * N);
  for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) out[i * N + j] = C[i * ldc + j];
  return out;
}

describe("native sgemm", () => {
  const sizes = [1, 3, 17, 65, 129];
  it("matches the reference for every M, N, K in {1, 3, 17, 65, 129} and all transposes", () => {
    let seed = 1;
    for (const M of sizes) {
      for (const N of sizes) {
        for (const K of sizes) {
          const ta = (seed & 1) === 1;
          const tb = (seed & 2) === 2;
          seed++;
          const what = `sgemm ${ta ? "T" : "N"}${tb ? "T" : "N"} M=${M} N=${N} K=${K}`;
          expectClose(
            gemmCase(nat, ta, tb, M, N, K, 1, 0, seed),
            gemmCase(ref, ta, tb, M, N, K, 1, 0, seed),
            what, 1e-4, 2e-6 * Math.sqrt(K),
          );
        }
      }
    }
  });

  it("honours alpha, beta and row strides in all four transpose modes", () => {
    for (const [ta, tb] of [[false, false], [false, true], [true, false], [true, true]] as const) {
      for (const [alpha, beta] of [[0.5, 1], [-1.25, -0.7], [2, 0], [0, 0.5]]) {
        const what = `sgemm ${ta}/${tb} alpha=${alpha} beta=${beta}`;
        expectClose(
          gemmCase(nat, ta, tb, 67, 45, 33, alpha, beta, 7, 5),
          gemmCase(ref, ta, tb, 67, 45, 33, alpha, beta, 7, 5),
          what, 1e-4, 1e-4,
        );
      }
    }
  });

  it("matches across cache blocks and threads (K > 256, N > 512)", () => {
    for (const [ta, tb] of [[false, true], [true, false]] as const) {
      expectClose(
        gemmCase(nat, ta, tb, 203, 531, 389, 1, 0.5, 11),
        gemmCase(ref, ta, tb, 203, 531, 389, 1, 0.5, 11),
        `large sgemm ${ta}/${tb}`, 1e-4, 1e-4,
      );
    }
  });

  it("products with B packed once for all threads (split by rows, or wider than a column block) match in all four transpose modes", () => {
    for (const [ta, tb] of [[false, false], [false, true], [true, false], [true, true]] as const) {
      for (const [M, N, K] of [[157, 75, 300], [403, 33, 517], [96, 130, 1030], [100, 530, 17]] as const) {
        expectClose(
          gemmCase(nat, ta, tb, M, N, K, 0.7, 0.5, 13, 3),
          gemmCase(ref, ta, tb, M, N, K, 0.7, 0.5, 13, 3),
          `row-split sgemm ${ta ? "T" : "N"}${tb ? "T" : "N"} M=${M} N=${N} K=${K}`, 1e-4, 1e-4,
        );
      }
    }
  });

  it("K = 0 scales C by beta; a too-short buffer is an error, not a crash", () => {
    const C = new Float32Array([1, 2, 3, 4]);
    nat.sgemm(false, false, 2, 2, 0, 1, new Float32Array(0), 1, new Float32Array(0), 2, 3, C, 2);
    expect(Array.from(C)).toEqual([3, 6, 9, 12]);
    expect(() => nat.sgemm(false, false, 4, 4, 4, 1, new Float32Array(15), 4, new Float32Array(16), 4, 0, new Float32Array(16), 4))
      .toThrow(/argument A has 15 elements, needs 16/);
  });
});

/** C = alpha * A W^T + beta * C through packWeight / sgemmPacked, with strides and subarray views. */
function packedCase(k: Kernels, M: number, N: number, K: number, alpha: number, beta: number, seed: number, pad = 0): Float32Array {
  const r = rng(seed);
  const lda = K + pad;
  const ldw = K + pad;
  const ldc = N + pad;
  const A = randn(r, 5 + M * lda).subarray(5);
  const W = randn(r, 3 + N * ldw).subarray(3);
  const C = randn(r, 7 + M * ldc).subarray(7);
  if (beta === 0) C.fill(NaN);
  const P = k.packWeight(N, K, W, ldw);
  W.fill(NaN); // a packed weight is a snapshot: later writes to W are not seen
  k.sgemmPacked(M, alpha, A, lda, P, beta, C, ldc);
  const out = new Float32Array(M * N);
  for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) out[i * N + j] = C[i * ldc + j];
  return out;
}

describe("native packed weights", () => {
  it("sgemmPacked equals the reference sgemm (x W^T) for odd shapes, strides, alpha and beta", () => {
    let seed = 1;
    for (const M of [1, 2, 5, 8, 33, 130]) {
      for (const N of [1, 7, 33, 100]) {
        for (const K of [1, 17, 300]) {
          for (const [alpha, beta, pad] of [[1, 0, 0], [0.5, 1, 3], [-2, 0.25, 1]] as const) {
            seed++;
            expectClose(
              packedCase(nat, M, N, K, alpha, beta, seed, pad),
              gemmCase(ref, false, true, M, N, K, alpha, beta, seed, pad),
              `sgemmPacked M=${M} N=${N} K=${K} alpha=${alpha} beta=${beta} pad=${pad}`, 1e-4, 1e-4,
            );
          }
        }
      }
    }
  });

  it("one packed weight serves many products, across cache blocks and threads", () => {
    const r = rng(77);
    const [N, K] = [531, 389];
    const W = randn(r, N * K);
    const P = nat.packWeight(N, K, W, K);
    for (const M of [3, 64, 203]) {
      const A = randn(r, M * K);
      const got = new Float32Array(M * N);
      const want = new Float32Array(M * N);
      nat.sgemmPacked(M, 1, A, K, P, 0, got, N);
      ref.sgemm(false, true, M, N, K, 1, A, K, W, K, 0, want, N);
      expectClose(got, want, `packed ${M}x${N}x${K}`, 1e-4, 1e-4);
    }
  });

  it("a weight packed by the other kernel set, or a too-short packed buffer, is an error", () => {
    const W = new Float32Array(6 * 4).fill(1);
    const C = new Float32Array(2 * 6);
    expect(() => nat.sgemmPacked(2, 1, new Float32Array(8), 4, ref.packWeight(6, 4, W, 4), 0, C, 6)).toThrow(/packed by the reference kernels/);
    expect(() => ref.sgemmPacked(2, 1, new Float32Array(8), 4, nat.packWeight(6, 4, W, 4), 0, C, 6)).toThrow(/packed by the native kernels/);
    const short = { ...nat.packWeight(6, 4, W, 4), data: new Float32Array(3) };
    expect(() => nat.sgemmPacked(2, 1, new Float32Array(8), 4, short, 0, C, 6)).toThrow(/packed has 3 elements/);
    expect(() => nat.packWeight(6, 4, new Float32Array(20), 4)).toThrow(/W has 20 elements/);
  });
});

describe("native sgemv", () => {
  it("matches the reference, both orientations, with strides and beta", () => {
    for (const [M, N] of [[1, 1], [3, 17], [129, 65], [700, 300], [64, 1025]]) {
      for (const trans of [false, true]) {
        for (const beta of [0, 0.5]) {
          const r = rng(M * 31 + N);
          const lda = N + 3;
          const A = randn(r, M * lda);
          const x = randn(r, trans ? M : N);
          const y0 = randn(r, trans ? N : M);
          const yn = y0.slice();
          const yr = y0.slice();
          nat.sgemv(trans, M, N, 0.75, A, lda, x, beta, yn);
          ref.sgemv(trans, M, N, 0.75, A, lda, x, beta, yr);
          expectClose(yn, yr, `sgemv ${trans ? "T" : "N"} ${M}x${N} beta=${beta}`, 1e-4, 1e-5 * Math.sqrt(M + N));
        }
      }
    }
  });
});

describe("native elementwise and row kernels", () => {
  const r = rng(99);

  it("axpy, scale, add, sumSquares, bias", () => {
    for (const n of [1, 7, 100_003]) {
      const x = randn(r, n);
      const y = randn(r, n);
      const [yn, yr] = [y.slice(), y.slice()];
      nat.axpy(n, -0.3, x, yn);
      ref.axpy(n, -0.3, x, yr);
      expectClose(yn, yr, `axpy n=${n}`, 1e-6, 1e-7);
      nat.scale(n, 1.7, yn);
      ref.scale(n, 1.7, yr);
      expectClose(yn, yr, `scale n=${n}`, 1e-6, 1e-7);
      const [on, or] = [new Float32Array(n), new Float32Array(n)];
      nat.add(n, x, y, on);
      ref.add(n, x, y, or);
      expectClose(on, or, `add n=${n}`, 0, 0);
      expect(nat.sumSquares(n, x)).toBeCloseTo(ref.sumSquares(n, x), Math.max(1, 6 - Math.log10(n)));
    }
    const [N, C] = [37, 129];
    const x = randn(r, N * C);
    const bias = randn(r, C);
    const [xn, xr] = [x.slice(), x.slice()];
    nat.addBias(N, C, xn, bias);
    ref.addBias(N, C, xr, bias);
    expectClose(xn, xr, "addBias", 0, 0);
    const [dbn, dbr] = [bias.slice(), bias.slice()];
    nat.biasBackward(N, C, x, dbn);
    ref.biasBackward(N, C, x, dbr);
    expectClose(dbn, dbr, "biasBackward (accumulates)", 1e-5, 1e-5);
  });

  it("embedding forward/backward, with repeated ids, and a bad id is an error", () => {
    const [N, C, V] = [50, 33, 11];
    const ids = Int32Array.from({ length: N }, (_, i) => (i * 7) % V);
    const table = randn(r, V * C);
    const [on, or] = [new Float32Array(N * C), new Float32Array(N * C)];
    nat.embeddingForward(N, C, V, ids, table, on);
    ref.embeddingForward(N, C, V, ids, table, or);
    expectClose(on, or, "embeddingForward", 0, 0);
    const dOut = randn(r, N * C);
    const [dn, dr] = [table.slice(), table.slice()];
    nat.embeddingBackward(N, C, V, ids, dOut, dn);
    ref.embeddingBackward(N, C, V, ids, dOut, dr);
    expectClose(dn, dr, "embeddingBackward", 1e-5, 1e-6);
    ids[3] = V;
    expect(() => nat.embeddingForward(N, C, V, ids, table, on)).toThrow(/token id 11 at row 3 is outside \[0, 11\)/);
  });

  it("rmsnorm forward/backward", () => {
    for (const [N, C] of [[1, 1], [5, 17], [64, 896]]) {
      const x = randn(r, N * C, 2);
      const w = randn(r, C);
      const [on, or, rn, rr] = [new Float32Array(N * C), new Float32Array(N * C), new Float32Array(N), new Float32Array(N)];
      nat.rmsnormForward(N, C, 1e-6, x, w, on, rn);
      ref.rmsnormForward(N, C, 1e-6, x, w, or, rr);
      expectClose(on, or, `rmsnormForward ${N}x${C}`, 1e-5, 1e-6);
      expectClose(rn, rr, `rmsnorm rstd ${N}x${C}`, 1e-5, 1e-6);
      const dOut = randn(r, N * C);
      const [dxn, dxr] = [new Float32Array(N * C), new Float32Array(N * C)];
      const [dwn, dwr] = [w.slice(), w.slice()];
      nat.rmsnormBackward(N, C, dOut, x, w, rr, dxn, dwn);
      ref.rmsnormBackward(N, C, dOut, x, w, rr, dxr, dwr);
      expectClose(dxn, dxr, `rmsnormBackward dX ${N}x${C}`, 1e-4, 1e-5);
      expectClose(dwn, dwr, `rmsnormBackward dW ${N}x${C}`, 1e-4, 1e-5);
    }
  });

  it("rope forward/backward (and backward undoes forward)", () => {
    const [N, H, D, P] = [13, 3, 64, 40];
    const cos = new Float32Array(P * (D / 2));
    const sin = new Float32Array(P * (D / 2));
    for (let p = 0; p < P; p++) {
      for (let i = 0; i < D / 2; i++) {
        const ang = p * Math.pow(10000, (-2 * i) / D);
        cos[p * (D / 2) + i] = Math.cos(ang);
        sin[p * (D / 2) + i] = Math.sin(ang);
      }
    }
    const pos = Int32Array.from({ length: N }, (_, i) => (i * 3) % P);
    const x = randn(r, N * H * D);
    const [xn, xr] = [x.slice(), x.slice()];
    nat.ropeForward(N, H, D, pos, cos, sin, xn);
    ref.ropeForward(N, H, D, pos, cos, sin, xr);
    expectClose(xn, xr, "ropeForward", 1e-5, 1e-6);
    nat.ropeBackward(N, H, D, pos, cos, sin, xn);
    ref.ropeBackward(N, H, D, pos, cos, sin, xr);
    expectClose(xn, xr, "ropeBackward", 1e-5, 1e-6);
    expectClose(xn, x, "rope backward(forward(x)) = x", 1e-5, 1e-5);
    pos[0] = P;
    expect(() => nat.ropeForward(N, H, D, pos, cos, sin, xn)).toThrow(/outside the cos\/sin tables/);
  });

  it("swiglu forward/backward, in place too", () => {
    const n = 4099;
    const g = randn(r, n, 6);
    const u = randn(r, n, 2);
    const d = randn(r, n);
    const [on, or] = [new Float32Array(n), new Float32Array(n)];
    nat.swigluForward(n, g, u, on);
    ref.swigluForward(n, g, u, or);
    expectClose(on, or, "swigluForward", 1e-5, 1e-6);
    const [dgr, dur] = [new Float32Array(n), new Float32Array(n)];
    ref.swigluBackward(n, d, g, u, dgr, dur);
    const [gi, ui] = [g.slice(), u.slice()];
    nat.swigluBackward(n, d, gi, ui, gi, ui);
    expectClose(gi, dgr, "swigluBackward dGate (in place)", 1e-5, 1e-6);
    expectClose(ui, dur, "swigluBackward dUp (in place)", 1e-5, 1e-6);
  });

  it("softmax, log-softmax, log-prob gather and its backward (in place), with temperature", () => {
    for (const [N, V] of [[1, 1], [3, 17], [9, 5003]]) {
      const x = randn(r, N * V, 8);
      for (const temp of [1, 0.7]) {
        const [sn, sr] = [new Float32Array(N * V), new Float32Array(N * V)];
        nat.softmaxRows(N, V, temp, x, sn);
        ref.softmaxRows(N, V, temp, x, sr);
        expectClose(sn, sr, `softmaxRows ${N}x${V} T=${temp}`, 1e-5, 1e-7);
        nat.logSoftmaxRows(N, V, temp, x, sn);
        ref.logSoftmaxRows(N, V, temp, x, sr);
        expectClose(sn, sr, `logSoftmaxRows ${N}x${V} T=${temp}`, 1e-5, 1e-5);
      }
      const targets = Int32Array.from({ length: N }, (_, i) => (i === 1 ? -1 : (i * 13) % V));
      const [lpn, lpr, lsn, lsr] = [new Float32Array(N), new Float32Array(N), new Float32Array(N), new Float32Array(N)];
      nat.logprobsForward(N, V, x, targets, lpn, lsn);
      ref.logprobsForward(N, V, x, targets, lpr, lsr);
      expectClose(lpn, lpr, `logprobsForward ${N}x${V}`, 1e-5, 1e-5);
      expectClose(lsn, lsr, `logprobsForward lse ${N}x${V}`, 1e-5, 1e-5);
      const dlp = randn(r, N);
      const dr = new Float32Array(N * V);
      ref.logprobsBackward(N, V, x, targets, lsr, dlp, dr);
      const inPlace = x.slice();
      nat.logprobsBackward(N, V, inPlace, targets, lsn, dlp, inPlace);
      expectClose(inPlace, dr, `logprobsBackward ${N}x${V} (in place)`, 1e-4, 1e-7);
    }
  });

  it("adamw matches over several steps", () => {
    const n = 10_001;
    const p0 = randn(r, n);
    const state = { n: [p0.slice(), new Float32Array(n), new Float32Array(n)], r: [p0.slice(), new Float32Array(n), new Float32Array(n)] };
    for (let step = 1; step <= 5; step++) {
      const g = randn(r, n);
      nat.adamwUpdate(n, state.n[0], g, state.n[1], state.n[2], 1e-2, 0.9, 0.95, 1e-8, 0.1, step, 0.5);
      ref.adamwUpdate(n, state.r[0], g, state.r[1], state.r[2], 1e-2, 0.9, 0.95, 1e-8, 0.1, step, 0.5);
    }
    expectClose(state.n[0], state.r[0], "adamw params", 1e-5, 1e-6);
    expectClose(state.n[2], state.r[2], "adamw v", 1e-5, 1e-9);
  });
});

function attnInputs(seed: number, s: AttentionShape) {
  const r = rng(seed);
  const qn = s.B * s.T * s.H * s.D;
  const kn = s.B * s.T * s.KVH * s.D;
  return { q: randn(r, qn), k: randn(r, kn), v: randn(r, kn), dOut: randn(r, qn), sink: randn(r, s.H, 2) };
}

function runAttention(k: Kernels, s: AttentionShape, m: AttentionMask, x: ReturnType<typeof attnInputs>, withSink: boolean) {
  const qn = s.B * s.T * s.H * s.D;
  const kn = s.B * s.T * s.KVH * s.D;
  const out = new Float32Array(qn);
  const lse = new Float32Array(s.B * s.T * s.H);
  const sink = withSink ? x.sink : null;
  k.attentionForward(s, m, x.q, x.k, x.v, sink, out, lse);
  const dQ = new Float32Array(qn);
  const dK = new Float32Array(kn).fill(NaN);
  const dV = new Float32Array(kn).fill(NaN);
  const dSink = withSink ? new Float32Array(s.H).fill(0.25) : null;
  k.attentionBackward(s, m, x.q, x.k, x.v, sink, out, lse, x.dOut, dQ, dK, dV, dSink);
  return { out, lse, dQ, dK, dV, dSink };
}

describe("native attention", () => {
  const shape: AttentionShape = { B: 2, T: 41, H: 4, KVH: 2, D: 16, scale: 0.25 };
  const docIds = new Int32Array(shape.B * shape.T);
  const pinned = new Uint8Array(shape.B * shape.T);
  for (let t = 0; t < shape.T; t++) {
    docIds[t] = t < 15 ? 0 : t < 30 ? 1 : 2;
    docIds[shape.T + t] = t < 25 ? 7 : 3;
    pinned[t] = t === 20 ? 1 : 0;
    pinned[shape.T + t] = t === 5 || t === 30 ? 1 : 0;
  }
  // a shared prefix (doc id -1) that every later document of its row sees
  const shared = new Int32Array(shape.B * shape.T);
  for (let t = 0; t < shape.T; t++) {
    shared[t] = t < 8 ? -1 : t < 20 ? 0 : t < 33 ? 1 : 2;
    shared[shape.T + t] = t < 12 ? -1 : 5;
  }
  const masks: [string, AttentionMask][] = [
    ["full causal", { window: 0, sinks: 0, docIds: null, pinned: null }],
    ["window 6 + 2 sinks", { window: 6, sinks: 2, docIds: null, pinned: null }],
    ["window 5 + 1 sink + documents + pinned", { window: 5, sinks: 1, docIds, pinned }],
    ["documents only", { window: Infinity, sinks: 0, docIds, pinned: null }],
    ["shared prefix + documents", { window: 0, sinks: 0, docIds: shared, pinned: null }],
    ["shared prefix + documents, window 6 + 2 sinks + pinned", { window: 6, sinks: 2, docIds: shared, pinned }],
  ];
  for (const [name, mask] of masks) {
    for (const withSink of [false, true]) {
      it(`forward and backward match the reference: ${name}${withSink ? ", sink logit" : ""}`, () => {
        const x = attnInputs(3, shape);
        const a = runAttention(nat, shape, mask, x, withSink);
        const b = runAttention(ref, shape, mask, x, withSink);
        expectClose(a.out, b.out, `${name} out`, 1e-4, 1e-5);
        expectClose(a.lse, b.lse, `${name} lse`, 1e-5, 1e-5);
        expectClose(a.dQ, b.dQ, `${name} dQ`, 1e-3, 1e-5);
        expectClose(a.dK, b.dK, `${name} dK`, 1e-3, 1e-5);
        expectClose(a.dV, b.dV, `${name} dV`, 1e-3, 1e-5);
        if (withSink) expectClose(a.dSink!, b.dSink!, `${name} dSinkLogit`, 1e-3, 1e-5);
      });
    }
  }

  it("a shared prefix longer than the window, seen from query blocks that span documents, matches the reference", () => {
    // 230 positions: blocks of 64 queries cross document boundaries, and most of the 90-position prefix is
    // out of the window of 40 for every query of the later blocks (only its sink slots and pinned ones stay)
    const s: AttentionShape = { B: 2, T: 230, H: 2, KVH: 1, D: 8, scale: 0.35 };
    const ids = new Int32Array(s.B * s.T);
    const pin = new Uint8Array(s.B * s.T);
    for (let t = 0; t < s.T; t++) {
      ids[t] = t < 90 ? -1 : t < 120 ? 0 : t < 150 ? 1 : t < 200 ? 2 : 3;
      ids[s.T + t] = t < 10 ? -1 : t < 100 ? 4 : 5;
      pin[t] = t === 50 ? 1 : 0;
    }
    for (const mask of [
      { window: 40, sinks: 3, docIds: ids, pinned: null },
      { window: 40, sinks: 0, docIds: ids, pinned: pin },
    ] as AttentionMask[]) {
      const x = attnInputs(23, s);
      const a = runAttention(nat, s, mask, x, true);
      const b = runAttention(ref, s, mask, x, true);
      expectClose(a.out, b.out, "long prefix out", 1e-4, 1e-5);
      expectClose(a.dQ, b.dQ, "long prefix dQ", 1e-3, 1e-5);
      expectClose(a.dK, b.dK, "long prefix dK", 1e-3, 1e-5);
      expectClose(a.dV, b.dV, "long prefix dV", 1e-3, 1e-5);
    }
  });

  it("400 back-to-back forward + backward calls give bit-identical results", () => {
    // one sequence and one kv head: the backward splits the query blocks over the threads and adds their
    // private dK / dV afterwards in a fixed order, so repeated calls must agree to the bit
    const s: AttentionShape = { B: 1, T: 130, H: 2, KVH: 1, D: 8, scale: 0.35 };
    const mask: AttentionMask = { window: 0, sinks: 0, docIds: null, pinned: null };
    const x = attnInputs(17, s);
    const first = runAttention(nat, s, mask, x, false);
    let worst = 0;
    for (let i = 0; i < 400; i++) {
      const again = runAttention(nat, s, mask, x, false);
      for (const key of ["out", "dQ", "dK", "dV"] as const) {
        for (let j = 0; j < first[key].length; j++) worst = Math.max(worst, Math.abs(first[key][j]! - again[key][j]!));
      }
    }
    expect(worst).toBe(0);
  });

  it("odd shapes: one token, MHA (KVH = H), head size 1, 3 and 128", () => {
    for (const s of [
      { B: 1, T: 1, H: 2, KVH: 1, D: 8, scale: 0.3 },
      { B: 3, T: 9, H: 3, KVH: 3, D: 3, scale: 0.5 },
      { B: 1, T: 17, H: 2, KVH: 1, D: 1, scale: 1 },
      { B: 1, T: 33, H: 8, KVH: 2, D: 128, scale: 1 / Math.sqrt(128) },
    ]) {
      const mask: AttentionMask = { window: 4, sinks: 1, docIds: null, pinned: null };
      const x = attnInputs(5, s);
      const a = runAttention(nat, s, mask, x, true);
      const b = runAttention(ref, s, mask, x, true);
      const what = JSON.stringify(s);
      expectClose(a.out, b.out, `${what} out`, 1e-4, 1e-5);
      expectClose(a.dQ, b.dQ, `${what} dQ`, 1e-3, 1e-5);
      expectClose(a.dK, b.dK, `${what} dK`, 1e-3, 1e-5);
      expectClose(a.dV, b.dV, `${what} dV`, 1e-3, 1e-5);
    }
  });

  it("sequences longer than one query block (64), with windows, documents and pins across blocks", () => {
    const s: AttentionShape = { B: 2, T: 150, H: 4, KVH: 2, D: 8, scale: 0.35 };
    const docs = new Int32Array(s.B * s.T);
    const pins = new Uint8Array(s.B * s.T);
    for (let t = 0; t < s.T; t++) {
      docs[t] = t < 70 ? 1 : 2;
      docs[s.T + t] = t < 20 ? 0 : t < 130 ? 1 : 2;
      pins[t] = t === 3 || t === 90 ? 1 : 0;
      pins[s.T + t] = t === 64 ? 1 : 0;
    }
    const sharedDocs = new Int32Array(s.B * s.T);
    for (let t = 0; t < s.T; t++) {
      sharedDocs[t] = t < 70 ? -1 : t < 100 ? 0 : 1; // a prefix longer than a query block
      sharedDocs[s.T + t] = t < 5 ? -1 : t < 140 ? 3 : 4;
    }
    const cases: [string, AttentionMask][] = [
      ["full causal", { window: 0, sinks: 0, docIds: null, pinned: null }],
      ["window 40 + 3 sinks", { window: 40, sinks: 3, docIds: null, pinned: null }],
      ["window 30 + 2 sinks + documents + pinned", { window: 30, sinks: 2, docIds: docs, pinned: pins }],
      ["shared prefix + documents", { window: 0, sinks: 0, docIds: sharedDocs, pinned: null }],
      ["window 30 + 2 sinks + shared prefix + documents + pinned", { window: 30, sinks: 2, docIds: sharedDocs, pinned: pins }],
    ];
    for (const [name, mask] of cases) {
      const x = attnInputs(13, s);
      const a = runAttention(nat, s, mask, x, true);
      const b = runAttention(ref, s, mask, x, true);
      expectClose(a.out, b.out, `T=150 ${name} out`, 1e-4, 1e-5);
      expectClose(a.lse, b.lse, `T=150 ${name} lse`, 1e-5, 1e-5);
      expectClose(a.dQ, b.dQ, `T=150 ${name} dQ`, 1e-3, 1e-5);
      expectClose(a.dK, b.dK, `T=150 ${name} dK`, 1e-3, 1e-5);
      expectClose(a.dV, b.dV, `T=150 ${name} dV`, 1e-3, 1e-5);
      expectClose(a.dSink!, b.dSink!, `T=150 ${name} dSinkLogit`, 1e-3, 1e-5);
    }
  });

  it("cached attention: one new token per sequence (few and many sequences), and prefills longer than a query block, match the reference", () => {
    const cases = [
      { H: 8, KVH: 2, D: 64, Tq: 1, lens: [1, 17, 40], window: 0, sinks: 0, sink: false },
      { H: 6, KVH: 2, D: 64, Tq: 1, lens: [33, 16, 50], window: 9, sinks: 1, sink: true },
      { H: 6, KVH: 2, D: 128, Tq: 1, lens: [48, 3, 21], window: 0, sinks: 0, sink: true },
      { H: 6, KVH: 3, D: 24, Tq: 1, lens: [30, 5, 9], window: 7, sinks: 2, sink: true },
      { H: 3, KVH: 3, D: 3, Tq: 1, lens: [12, 2, 25], window: 4, sinks: 0, sink: true },
      // head sizes that are not a multiple of 16 (the last chunk of each row masked)
      { H: 4, KVH: 2, D: 40, Tq: 1, lens: [35, 2, 18], window: 0, sinks: 0, sink: false },
      { H: 2, KVH: 1, D: 100, Tq: 1, lens: [20, 9], window: 6, sinks: 2, sink: true },
      // many sequences (decoding runs one task per sequence then)
      { H: 8, KVH: 2, D: 64, Tq: 1, lens: [1, 17, 40, 5, 33, 16, 50, 2, 9, 64, 31, 8], window: 0, sinks: 0, sink: true },
      { H: 6, KVH: 3, D: 128, Tq: 1, lens: [12, 3, 40, 21, 7, 1, 19, 30, 5, 26], window: 9, sinks: 1, sink: false },
      { H: 4, KVH: 2, D: 24, Tq: 1, lens: [12, 3, 40, 21, 7, 1, 19, 30, 5, 26], window: 0, sinks: 0, sink: true },
      { H: 4, KVH: 1, D: 16, Tq: 70, lens: [70, 75, 131], window: 0, sinks: 0, sink: true },
      { H: 4, KVH: 2, D: 8, Tq: 67, lens: [67, 100, 90], window: 20, sinks: 3, sink: false },
    ];
    let seed = 40;
    for (const c of cases) {
      const B = c.lens.length;
      const blockSize = 7;
      const maxBlocks = Math.ceil(Math.max(...c.lens) / blockSize);
      const numBlocks = B * maxBlocks + 1;
      const r = rng(seed++);
      const kCache = randn(r, numBlocks * blockSize * c.KVH * c.D);
      const vCache = randn(r, numBlocks * blockSize * c.KVH * c.D);
      const blockTable = Int32Array.from({ length: B * maxBlocks }, (_, i) => (i * 5 + 2) % numBlocks);
      const seqLens = Int32Array.from(c.lens);
      const q = randn(r, B * c.Tq * c.H * c.D);
      const sink = c.sink ? randn(r, c.H, 2) : null;
      const shape = { B, Tq: c.Tq, H: c.H, KVH: c.KVH, D: c.D, scale: 1 / Math.sqrt(c.D), blockSize, maxBlocks };
      const outN = new Float32Array(q.length).fill(NaN);
      const outR = new Float32Array(q.length);
      nat.attentionCached(shape, c.window, c.sinks, q, kCache, vCache, blockTable, seqLens, sink, outN);
      ref.attentionCached(shape, c.window, c.sinks, q, kCache, vCache, blockTable, seqLens, sink, outR);
      expectClose(outN, outR, `cached ${JSON.stringify(c)}`, 1e-4, 1e-5);
    }
  });

  it("cached attention over a shuffled paged cache equals full attention's last rows", () => {
    const s = { B: 3, T: 29, H: 6, KVH: 2, D: 32, scale: 0.2 };
    const x = attnInputs(8, s);
    const Tq = 4;
    const blockSize = 5;
    const maxBlocks = Math.ceil(s.T / blockSize);
    const numBlocks = s.B * maxBlocks + 2;
    const rowElems = s.KVH * s.D;
    const kCache = new Float32Array(numBlocks * blockSize * rowElems).fill(NaN);
    const vCache = new Float32Array(numBlocks * blockSize * rowElems).fill(NaN);
    const blockTable = new Int32Array(s.B * maxBlocks);
    // hand out blocks in a scrambled order
    const order = Array.from({ length: numBlocks }, (_, i) => (i * 7 + 3) % numBlocks);
    let next = 0;
    const lens = Int32Array.from([29, 17, 4]);
    for (let b = 0; b < s.B; b++) {
      for (let j = 0; j < maxBlocks; j++) blockTable[b * maxBlocks + j] = order[next++];
      for (let t = 0; t < lens[b]; t++) {
        const dst = (blockTable[b * maxBlocks + Math.floor(t / blockSize)] * blockSize + (t % blockSize)) * rowElems;
        kCache.set(x.k.subarray((b * s.T + t) * rowElems, (b * s.T + t + 1) * rowElems), dst);
        vCache.set(x.v.subarray((b * s.T + t) * rowElems, (b * s.T + t + 1) * rowElems), dst);
      }
    }
    for (const [window, sinks] of [[0, 0], [6, 2]]) {
      const mask: AttentionMask = { window, sinks, docIds: null, pinned: null };
      const q = new Float32Array(s.B * Tq * s.H * s.D);
      for (let b = 0; b < s.B; b++) {
        const rows = s.H * s.D;
        q.set(x.q.subarray((b * s.T + lens[b] - Tq) * rows, (b * s.T + lens[b]) * rows), b * Tq * rows);
      }
      const cshape = { ...s, B: s.B, Tq, blockSize, maxBlocks };
      const outN = new Float32Array(q.length);
      const outR = new Float32Array(q.length);
      nat.attentionCached(cshape, window, sinks, q, kCache, vCache, blockTable, lens, x.sink, outN);
      ref.attentionCached(cshape, window, sinks, q, kCache, vCache, blockTable, lens, x.sink, outR);
      expectClose(outN, outR, `cached w=${window} s=${sinks} vs reference`, 1e-4, 1e-5);
      // full attention of each sequence, truncated to its length, gives the same last Tq rows
      for (let b = 0; b < s.B; b++) {
        const L = lens[b];
        const one = { ...s, B: 1, T: L };
        const rows = s.H * s.D;
        const kv = s.KVH * s.D;
        const out = new Float32Array(L * rows);
        nat.attentionForward(one, mask, x.q.subarray(b * s.T * rows, (b * s.T + L) * rows),
          x.k.subarray(b * s.T * kv, (b * s.T + L) * kv), x.v.subarray(b * s.T * kv, (b * s.T + L) * kv),
          x.sink, out, new Float32Array(L * s.H));
        expectClose(outN.subarray(b * Tq * rows, (b + 1) * Tq * rows), out.subarray((L - Tq) * rows),
          `cached w=${window} s=${sinks} batch ${b} vs full attention`, 1e-4, 1e-5);
      }
    }
    lens[0] = 31;
    expect(() => nat.attentionCached({ ...s, Tq, blockSize, maxBlocks }, 0, 0, new Float32Array(s.B * Tq * s.H * s.D),
      kCache, vCache, blockTable, lens, null, new Float32Array(s.B * Tq * s.H * s.D))).toThrow(/seqLens\[0\] = 31/);
  });
});

describe("SIMD levels and kernel selection", () => {
  // The SIMD level is fixed per process, so the lower levels run in child processes.
  const script = `
    const m = require(${JSON.stringify(nativeAddonPath)});
    let s = 7; const r = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
    const [M, N, K] = [67, 45, 301];
    const A = Float32Array.from({ length: M * K }, r), B = Float32Array.from({ length: N * K }, r);
    const C = new Float32Array(M * N);
    m.sgemm(false, true, M, N, K, 1, A, K, B, K, 0, C, N);
    let err = 0;
    for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) {
      let t = 0; for (let p = 0; p < K; p++) t += A[i * K + p] * B[j * K + p];
      err = Math.max(err, Math.abs(t - C[i * N + j]));
    }
    // products split by rows (B packed once; with SFX_PACK_MB=1, in chunks of depth) and packed weights
    for (const [ta, M2, N2, K2] of [[false, 200, 72, 5000], [true, 203, 131, 389]]) {
      const A2 = Float32Array.from({ length: M2 * K2 }, r), B2 = Float32Array.from({ length: K2 * N2 }, r);
      const C2 = new Float32Array(M2 * N2);
      m.sgemm(ta, false, M2, N2, K2, 1, A2, ta ? M2 : K2, B2, N2, 0, C2, N2);
      const W2 = new Float32Array(N2 * K2);
      for (let p = 0; p < K2; p++) for (let j = 0; j < N2; j++) W2[j * K2 + p] = B2[p * N2 + j];
      const P2 = new Float32Array(m.packedWeightSize(N2, K2));
      m.packWeight(N2, K2, W2, K2, P2);
      const D2 = new Float32Array(M2 * N2);
      const Ar = new Float32Array(M2 * K2);
      for (let i = 0; i < M2; i++) for (let p = 0; p < K2; p++) Ar[i * K2 + p] = ta ? A2[p * M2 + i] : A2[i * K2 + p];
      m.sgemmPacked(M2, N2, K2, 1, Ar, K2, P2, 0, D2, N2);
      for (let i = 0; i < M2; i++) for (let j = 0; j < N2; j++) {
        let t = 0; for (let p = 0; p < K2; p++) t += Ar[i * K2 + p] * B2[p * N2 + j];
        err = Math.max(err, Math.abs(t - C2[i * N2 + j]) / 10, Math.abs(t - D2[i * N2 + j]) / 10);
      }
    }
    const g = Float32Array.from({ length: 1000 }, r), u = Float32Array.from({ length: 1000 }, r), o = new Float32Array(1000);
    m.swigluForward(1000, g, u, o);
    for (let i = 0; i < 1000; i++) err = Math.max(err, Math.abs(o[i] - g[i] / (1 + Math.exp(-g[i])) * u[i]));
    // decoding attention (one new token against a paged cache, a sink logit), head sizes with a whole number
    // of SIMD chunks or not, an odd number of query heads per kv head
    for (const [H, KVH, D] of [[6, 2, 64], [8, 2, 24], [4, 2, 40], [2, 1, 100]]) {
      const B = 3, bs = 8, maxBlocks = 5, lens = Int32Array.from([37, 5, 20]), G = H / KVH, scale = 1 / Math.sqrt(D);
      const kc = Float32Array.from({ length: B * maxBlocks * bs * KVH * D }, r), vc = Float32Array.from({ length: kc.length }, r);
      const table = Int32Array.from({ length: B * maxBlocks }, (_, i) => (i * 7) % (B * maxBlocks));
      const q = Float32Array.from({ length: B * H * D }, r), sink = Float32Array.from({ length: H }, r);
      const o = new Float32Array(B * H * D);
      m.attentionCached(B, 1, H, KVH, D, scale, bs, maxBlocks, 0, 0, q, kc, vc, table, lens, sink, o);
      for (let b = 0; b < B; b++) for (let h = 0; h < H; h++) {
        const offs = [], sc = [];
        for (let j = 0; j < lens[b]; j++) {
          const off = ((table[b * maxBlocks + Math.floor(j / bs)] * bs + (j % bs)) * KVH + Math.floor(h / G)) * D;
          let t = 0; for (let d = 0; d < D; d++) t += q[(b * H + h) * D + d] * kc[off + d];
          offs.push(off); sc.push(t * scale);
        }
        const mx = Math.max(sink[h], ...sc);
        const z = Math.exp(sink[h] - mx) + sc.reduce((a, x) => a + Math.exp(x - mx), 0);
        for (let d = 0; d < D; d++) {
          let t = 0; for (let j = 0; j < sc.length; j++) t += (Math.exp(sc[j] - mx) / z) * vc[offs[j] + d];
          err = Math.max(err, Math.abs(t - o[(b * H + h) * D + d]));
        }
      }
    }
    console.log(JSON.stringify({ simd: m.info().simd, err }));`;
  for (const level of ["portable", "avx2", "avx512"]) {
    it(`SINKFLEX_SIMD=${level} computes the same results (packed B in chunks of depth too, decoding attention)`, () => {
      const res = spawnSync(process.execPath, ["-e", script], {
        env: { ...process.env, SINKFLEX_SIMD: level, SINKFLEX_THREADS: "2", SFX_PACK_MB: "1" },
        encoding: "utf8",
      });
      expect(res.status, res.stderr).toBe(0);
      const out = JSON.parse(res.stdout) as { simd: string; err: number };
      // a CPU without the level runs a lower one; never a higher one
      const order = ["portable", "avx2", "avx512"];
      expect(order.indexOf(out.simd)).toBeLessThanOrEqual(order.indexOf(level));
      if (level === "portable") expect(out.simd).toBe("portable");
      expect(out.err).toBeLessThan(1e-4);
    });
  }

  // The AVX2 micro-kernel once ran at about a third of the FMA peak (its accumulators were stored to memory
  // on every step of depth); now it runs at 80% or more. Time is counted in CPU seconds of the one thread,
  // so other load on the machine does not count; the peak is the best round of a tight FMA loop.
  it("SINKFLEX_SIMD=avx2: sgemm on one thread runs at more than half the FMA peak", () => {
    const perf = `
      const m = require(${JSON.stringify(nativeAddonPath)});
      if (m.info().simd !== "avx2") { console.log(JSON.stringify({ simd: m.info().simd })); process.exit(0); }
      const peak = m.peakGflops(0.5, 1);
      const rate = (ta, M, N, K) => {
        const A = new Float32Array(M * K).fill(0.5), B = new Float32Array(N * K).fill(0.25), C = new Float32Array(M * N);
        const run = () => m.sgemm(ta, !ta, M, N, K, 1, A, ta ? M : K, B, K, 0, C, N);
        run();
        let best = Infinity;
        for (let i = 0; i < 15; i++) {
          const u0 = process.cpuUsage(); run(); const u = process.cpuUsage(u0);
          best = Math.min(best, (u.user + u.system) / 1e6);
        }
        return (2 * M * N * K) / best / 1e9;
      };
      console.log(JSON.stringify({ simd: "avx2", peak, nt: rate(false, 384, 512, 512), tn: rate(true, 384, 512, 512) }));`;
    const res = spawnSync(process.execPath, ["-e", perf], {
      env: { ...process.env, SINKFLEX_SIMD: "avx2", SINKFLEX_THREADS: "1" },
      encoding: "utf8",
    });
    expect(res.status, res.stderr).toBe(0);
    const out = JSON.parse(res.stdout) as { simd: string; peak?: number; nt?: number; tn?: number };
    if (out.simd !== "avx2") return; // this CPU has no AVX2 and FMA: nothing to measure
    expect(out.nt!, JSON.stringify(out)).toBeGreaterThan(0.5 * out.peak!);
    expect(out.tn!, JSON.stringify(out)).toBeGreaterThan(0.5 * out.peak!);
  }, 60_000);

  it("getKernels picks native by default and honours the override", () => {
    expect(getKernels().name).toBe(process.env.SINKFLEX_KERNELS === "reference" ? "reference" : "native");
    expect(getKernels("reference").name).toBe("reference");
    expect(getKernels("native").describe()).toMatch(/^native \((avx512|avx2|neon|portable), \d+ threads?\)$/);
    const prev = process.env.SINKFLEX_KERNELS;
    process.env.SINKFLEX_KERNELS = "fast";
    try {
      expect(() => getKernels()).toThrow(/SINKFLEX_KERNELS must be "native" or "reference", got "fast"/);
    } finally {
      if (prev === undefined) delete process.env.SINKFLEX_KERNELS;
      else process.env.SINKFLEX_KERNELS = prev;
    }
  });
});

describe("native denormals", () => {
  it("flushes values below float's normal range to 0 (single-threaded and pooled work), and leaves JavaScript's own math alone", () => {
    const tiny = 1e-39; // a float32 denormal
    // scale runs on the calling thread: the denormal input reads as 0, and a product below the normal range is written as 0
    const x = Float32Array.from([tiny, 1e-20, 3]);
    nat.scale(3, 1e-20, x);
    expect(Array.from(x)).toEqual([0, 0, Math.fround(Math.fround(3) * Math.fround(1e-20))]);
    // a GEMM large enough for the thread pool: every product is 1e-20 * 1e-20, below the normal range
    const n = 96;
    const A = new Float32Array(n * n).fill(1e-20);
    const B = new Float32Array(n * n).fill(1e-20);
    const C = new Float32Array(n * n).fill(NaN);
    nat.sgemm(false, false, n, n, n, 1, A, n, B, n, 0, C, n);
    expect(C.every((v) => v === 0)).toBe(true);
    // after native calls, the JavaScript thread still computes with denormal doubles
    const values = [Number.MIN_VALUE, 2];
    expect(values[0]! * values[1]!).toBe(2 * Number.MIN_VALUE);
    expect(Math.fround(tiny)).toBeGreaterThan(0);
  });
});
