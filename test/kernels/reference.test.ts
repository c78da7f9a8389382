/**
 * The reference kernels' backward passes against finite differences of their forward passes, so the
 * oracle the native kernels are compared with is itself right. Directional derivatives: for a random
 * direction u, (L(x + e u) - L(x - e u)) / 2e must equal <dL/dx, u>, with L = <f(x), w> for a random w.
 */
import { describe, expect, it } from "vitest";
import type { AttentionMask, AttentionShape } from "../../src/kernels/kernels.js";
import { referenceKernels as ref } from "../../src/kernels/reference.js";
import { randn, rng } from "./helpers.js";

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** Central difference of L along u at x (x is restored). */
function directional(x: Float32Array, u: Float32Array, L: () => number, eps = 1e-2): number {
  const x0 = x.slice();
  for (let i = 0; i < x.length; i++) x[i] = x0[i] + eps * u[i];
  const lp = L();
  for (let i = 0; i < x.length; i++) x[i] = x0[i] - eps * u[i];
  const lm = L();
  x.set(x0);
  return (lp - lm) / (2 * eps);
}

function expectDerivative(numeric: number, analytic: number, what: string): void {
  expect(Math.abs(numeric - analytic), `${what}: numeric ${numeric} vs analytic ${analytic}`).toBeLessThan(
    2e-3 + 2e-3 * Math.abs(analytic),
  );
}

describe("reference backward passes vs finite differences", () => {
  it("attention (window, sinks, documents, pinned, sink logit) gives dQ, dK, dV, dSinkLogit", () => {
    const r = rng(42);
    const s: AttentionShape = { B: 2, T: 11, H: 4, KVH: 2, D: 5, scale: 0.4 };
    const docIds = Int32Array.from({ length: s.B * s.T }, (_, i) => (i % s.T < 6 ? 0 : 1));
    const pinned = Uint8Array.from({ length: s.B * s.T }, (_, i) => (i % s.T === 7 ? 1 : 0));
    const mask: AttentionMask = { window: 2, sinks: 1, docIds, pinned };
    const qn = s.B * s.T * s.H * s.D;
    const kn = s.B * s.T * s.KVH * s.D;
    const q = randn(r, qn);
    const k = randn(r, kn);
    const v = randn(r, kn);
    const sink = randn(r, s.H);
    const w = randn(r, qn);
    const out = new Float32Array(qn);
    const lse = new Float32Array(s.B * s.T * s.H);
    const L = () => {
      ref.attentionForward(s, mask, q, k, v, sink, out, lse);
      return dot(out, w);
    };
    L();
    const [dQ, dK, dV, dSink] = [new Float32Array(qn), new Float32Array(kn), new Float32Array(kn), new Float32Array(s.H)];
    ref.attentionBackward(s, mask, q, k, v, sink, out, lse, w, dQ, dK, dV, dSink);
    for (const [name, x, g] of [["q", q, dQ], ["k", k, dK], ["v", v, dV], ["sinkLogit", sink, dSink]] as const) {
      const u = randn(r, x.length);
      expectDerivative(directional(x, u, L), dot(g, u), `attention d${name}`);
    }
  });

  it("rmsnorm, swiglu, rope and log-prob gather", () => {
    const r = rng(7);
    const [N, C] = [4, 9];
    const x = randn(r, N * C, 2);
    const wt = randn(r, C);
    const w = randn(r, N * C);
    const out = new Float32Array(N * C);
    const rstd = new Float32Array(N);
    const Lr = () => {
      ref.rmsnormForward(N, C, 1e-5, x, wt, out, rstd);
      return dot(out, w);
    };
    Lr();
    const [dX, dW] = [new Float32Array(N * C), new Float32Array(C)];
    ref.rmsnormBackward(N, C, w, x, wt, rstd, dX, dW);
    let u = randn(r, x.length);
    expectDerivative(directional(x, u, Lr), dot(dX, u), "rmsnorm dX");
    u = randn(r, C);
    expectDerivative(directional(wt, u, Lr), dot(dW, u), "rmsnorm dWeight");

    const n = 30;
    const g = randn(r, n, 3);
    const up = randn(r, n);
    const ws = randn(r, n);
    const o = new Float32Array(n);
    const Ls = () => {
      ref.swigluForward(n, g, up, o);
      return dot(o, ws);
    };
    const [dG, dU] = [new Float32Array(n), new Float32Array(n)];
    ref.swigluBackward(n, ws, g, up, dG, dU);
    u = randn(r, n);
    expectDerivative(directional(g, u, Ls), dot(dG, u), "swiglu dGate");
    expectDerivative(directional(up, u, Ls), dot(dU, u), "swiglu dUp");

    const [H, D, P] = [2, 6, 5];
    const cos = Float32Array.from({ length: P * 3 }, (_, i) => Math.cos(i * 0.37));
    const sin = Float32Array.from({ length: P * 3 }, (_, i) => Math.sin(i * 0.37));
    const pos = Int32Array.from([4, 0, 2]);
    const xr = randn(r, 3 * H * D);
    const wr = randn(r, 3 * H * D);
    const Lp = () => {
      const y = xr.slice();
      ref.ropeForward(3, H, D, pos, cos, sin, y);
      return dot(y, wr);
    };
    const dXr = wr.slice();
    ref.ropeBackward(3, H, D, pos, cos, sin, dXr);
    u = randn(r, xr.length);
    expectDerivative(directional(xr, u, Lp), dot(dXr, u), "rope dX");

    const V = 7;
    const logits = randn(r, N * V, 3);
    const targets = Int32Array.from([1, -1, 6, 0]);
    const wl = randn(r, N);
    const lp = new Float32Array(N);
    const lse = new Float32Array(N);
    const Ll = () => {
      ref.logprobsForward(N, V, logits, targets, lp, lse);
      return dot(lp, wl);
    };
    Ll();
    const dL = new Float32Array(N * V);
    ref.logprobsBackward(N, V, logits, targets, lse, wl, dL);
    u = randn(r, logits.length);
    expectDerivative(directional(logits, u, Ll), dot(dL, u), "logprobs dLogits");
  });
});

describe("reference packed weights", () => {
  it("sgemmPacked is sgemm(x W^T) on a snapshot of W, with strides", () => {
    const r = rng(5);
    const [M, N, K, ldw] = [3, 5, 7, 9];
    const W = randn(r, N * ldw);
    const A = randn(r, M * K);
    const P = ref.packWeight(N, K, W, ldw);
    expect(P.kernels).toBe("reference");
    const want = new Float32Array(M * N);
    ref.sgemm(false, true, M, N, K, 0.5, A, K, W, ldw, 0, want, N);
    W.fill(0);
    const got = new Float32Array(M * N).fill(NaN);
    ref.sgemmPacked(M, 0.5, A, K, P, 0, got, N);
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(() => ref.packWeight(N, K, new Float32Array(10), K)).toThrow(/W has 10 elements/);
  });
});
