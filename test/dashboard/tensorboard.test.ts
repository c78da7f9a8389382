/**
 * The TensorBoard export against a real (tiny) training run: every event file is read back by a small
 * reader written here (record lengths and masked CRC32C checked, the Event protobuf decoded by hand),
 * and, when Python's `tensorboard` package is importable, by TensorBoard's own EventAccumulator in a
 * subprocess. It is not the dashboard's server suite (dashboard.test.ts).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportTensorboard, flattenRecord } from "../../src/dashboard/index.js";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";

registerParityEnv();

// The reader's own CRC32C (bitwise, no table), so that a wrong table in the writer cannot agree with it.
function crc32cBitwise(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of data) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}
const masked = (d: Uint8Array) => {
  const c = crc32cBitwise(d);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
};

interface ReadEvent {
  wallTime?: number;
  step?: number;
  fileVersion?: string;
  values: [string, number][];
}

/** Protobuf fields of `buf`: [field number, wire type, value (number, bigint or bytes)]. */
function fields(buf: Buffer): [number, number, number | bigint | Buffer][] {
  const out: [number, number, number | bigint | Buffer][] = [];
  let p = 0;
  const varint = () => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[p++]!;
      v |= BigInt(b & 0x7f) << shift;
      shift += 7n;
      if (!(b & 0x80)) return v;
    }
  };
  while (p < buf.length) {
    const key = Number(varint());
    const [field, wire] = [key >> 3, key & 7];
    if (wire === 0) out.push([field, wire, varint()]);
    else if (wire === 1) {
      out.push([field, wire, buf.readDoubleLE(p)]);
      p += 8;
    } else if (wire === 5) {
      out.push([field, wire, buf.readFloatLE(p)]);
      p += 4;
    } else if (wire === 2) {
      const n = Number(varint());
      out.push([field, wire, buf.subarray(p, p + n)]);
      p += n;
    } else throw new Error(`wire type ${wire} at byte ${p}`);
  }
  return out;
}

/** Reads a tfevents file, checking every record's length and data CRCs. */
function readEvents(file: string): ReadEvent[] {
  const buf = readFileSync(file);
  const events: ReadEvent[] = [];
  let p = 0;
  while (p < buf.length) {
    expect(buf.length - p, `${file}: a record header at byte ${p}`).toBeGreaterThanOrEqual(12);
    const len = Number(buf.readBigUInt64LE(p));
    expect(buf.readUInt32LE(p + 8), `length CRC at byte ${p}`).toBe(masked(buf.subarray(p, p + 8)));
    const data = buf.subarray(p + 12, p + 12 + len);
    expect(data.length, `record at byte ${p} is cut short`).toBe(len);
    expect(buf.readUInt32LE(p + 12 + len), `data CRC at byte ${p}`).toBe(masked(data));
    p += 16 + len;
    const e: ReadEvent = { values: [] };
    for (const [f, , v] of fields(data)) {
      if (f === 1) e.wallTime = v as number;
      else if (f === 2) e.step = Number(v);
      else if (f === 3) e.fileVersion = (v as Buffer).toString("utf8");
      else if (f === 5) {
        for (const [vf, , value] of fields(v as Buffer)) {
          if (vf !== 1) continue;
          let tag = "";
          let simple = NaN;
          for (const [k, , x] of fields(value as Buffer)) {
            if (k === 1) tag = (x as Buffer).toString("utf8");
            if (k === 2) simple = x as number;
          }
          e.values.push([tag, simple]);
        }
      }
    }
    events.push(e);
  }
  return events;
}

const EVENT_ACCUMULATOR = `
import json, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {}
for stage in sorted(os.listdir(sys.argv[1])):
    acc = EventAccumulator(os.path.join(sys.argv[1], stage), size_guidance={"scalars": 0})
    acc.Reload()
    out[stage] = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
print(json.dumps(out))
`;

/** The Python with torch (CI's worker environment names it), else the system's. */
const PYTHON = process.env.SINKFLEX_TORCH_PYTHON ?? "python3";

describe("TensorBoard export", () => {
  let root: string;
  let runsDir: string;
  let records: Record<string, unknown>[];
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "tb-"));
    runsDir = join(root, "runs");
    mkdirSync(runsDir);
    await train(parityConfig(runsDir, "alpha", 3), { quiet: true });
    records = readFileSync(join(runsDir, "alpha", "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
  }, 120_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("writes one folder per stage, one tag per logged figure, each record's CRCs right", async () => {
    const out = join(root, "tb");
    const done = await exportTensorboard(runsDir, "alpha", out);
    const stages = [...new Set(records.map((r) => r.stage as string))].sort();
    expect(readdirSync(out).sort()).toEqual(stages);
    expect(done.files).toHaveLength(stages.length);
    for (const stage of stages) {
      const files = readdirSync(join(out, stage));
      expect(files).toHaveLength(1);
      expect(files[0]).toMatch(/^events\.out\.tfevents\.\d+\.sinkflex$/);
      const events = readEvents(join(out, stage, files[0]!));
      expect(events[0]!.fileVersion).toBe("brain.Event:2");
      const mine = records.filter((r) => r.stage === stage);
      expect(events.slice(1)).toHaveLength(mine.length);
      for (const [i, r] of mine.entries()) {
        const e = events[i + 1]!;
        expect(e.step).toBe(r.step);
        const numbers = Object.entries(flattenRecord(r)).filter(([k, v]) => !["stage", "step", "time"].includes(k) && typeof v === "number");
        expect(e.values.map(([t]) => t)).toEqual(numbers.map(([k]) => k));
        for (const [[, got], [, want]] of e.values.map((v, j) => [v, numbers[j]!] as const)) expect(got).toBeCloseTo(Math.fround(want as number), 5);
      }
    }
    for (const tag of ["reward.parity", "success.parity", "kl", "loss", "phaseMs.rollout"]) expect(done.tags).toContain(tag);
  });

  it("reads back through TensorBoard's EventAccumulator (when Python's tensorboard is importable)", async (ctx) => {
    const probe = spawnSync(PYTHON, ["-c", "import tensorboard.backend.event_processing.event_accumulator"], { encoding: "utf8", timeout: 60_000 });
    if (probe.status !== 0) {
      console.log(`skipped: Python's tensorboard package is not importable (${(probe.stderr || probe.error?.message || "").trim().split("\n").pop()}); pip install tensorboard to run this check`);
      ctx.skip();
      return;
    }
    const out = join(root, "tb-py");
    await exportTensorboard(runsDir, "alpha", out);
    const py = spawnSync(PYTHON, ["-c", EVENT_ACCUMULATOR, out], { encoding: "utf8", timeout: 120_000 });
    expect(py.status, py.stderr).toBe(0);
    const read = JSON.parse(py.stdout) as Record<string, Record<string, [number, number][]>>;
    const grpo = records.filter((r) => r.stage === "grpo");
    expect(read.grpo!["kl"]!.map(([s]) => s)).toEqual(grpo.map((r) => r.step));
    expect(read.grpo!["kl"]!.map(([, v]) => v)[2]).toBeCloseTo(grpo[2]!.kl as number, 5);
    expect(Object.keys(read.grpo!)).toContain("reward.parity");
    expect(Object.keys(read.sft!)).toContain("loss");
  }, 150_000);

  it("says what is wrong for a run that is not there", async () => {
    await expect(exportTensorboard(runsDir, "nope", join(root, "x"))).rejects.toThrow(/no run named "nope"/);
    await expect(exportTensorboard(join(root, "missing"), "alpha", join(root, "x"))).rejects.toThrow(/runs folder .* does not exist/);
  });
});
