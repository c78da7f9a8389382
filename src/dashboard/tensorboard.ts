/**
 * TensorBoard export: writes a run's scalar metrics (metrics.jsonl) as TensorBoard event files, one
 * folder per stage (`sft/`, `grpo/`, `eval-before/`, ...: TensorBoard shows each as a run, so SFT's and
 * GRPO's step numbers never collide), one tag per logged figure named by its dotted path as in the CSV
 * export (`reward.parity`, `phaseMs.rollout`). Only finite numbers are written; text, booleans and arrays
 * are left out. The record format is TFRecord's (uint64 length, masked CRC32C of the length, the data,
 * masked CRC32C of the data) holding `Event` protobufs, whose few fields are encoded here by hand.
 *
 * It is not a TensorBoard reader, and it writes only into the folder it is given (never the run folder).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { realpath } from "node:fs/promises";
import { join } from "node:path";
import { flattenRecord, HttpError, readAllMetrics } from "./server.js";

const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC32C (Castagnoli) of `data`. */
export function crc32c(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const byte of data) c = CRC32C_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotate right by 15 bits, then add 0xa282ead8 (mod 2^32). */
export function maskedCrc32c(data: Uint8Array): number {
  const c = crc32c(data);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

function varint(n: bigint | number): number[] {
  let v = BigInt.asUintN(64, BigInt(n));
  const out: number[] = [];
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return out;
}

/** One length-delimited protobuf field (wire type 2). */
function bytesField(field: number, body: Uint8Array): Buffer {
  return Buffer.from([...varint((field << 3) | 2), ...varint(body.length), ...body]);
}

/** Summary.Value{tag = 1, simple_value = 2 (float)}. */
function summaryValue(tag: string, value: number): Buffer {
  const f = Buffer.alloc(5);
  f[0] = (2 << 3) | 5;
  f.writeFloatLE(value, 1);
  return Buffer.concat([bytesField(1, Buffer.from(tag, "utf8")), f]);
}

/** Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5 {value = 1 ...}}. */
export function encodeEvent(event: { wallTime: number; step: number; fileVersion?: string; values?: [string, number][] }): Buffer {
  const wall = Buffer.alloc(9);
  wall[0] = (1 << 3) | 1;
  wall.writeDoubleLE(event.wallTime, 1);
  const parts: Buffer[] = [wall, Buffer.from([(2 << 3) | 0, ...varint(Math.trunc(event.step))])];
  if (event.fileVersion !== undefined) parts.push(bytesField(3, Buffer.from(event.fileVersion, "utf8")));
  if (event.values) parts.push(bytesField(5, Buffer.concat(event.values.map(([tag, v]) => bytesField(1, summaryValue(tag, v))))));
  return Buffer.concat(parts);
}

/** One TFRecord: length, its masked CRC, the data, its masked CRC. */
export function tfRecord(data: Uint8Array): Buffer {
  const head = Buffer.alloc(12);
  head.writeBigUInt64LE(BigInt(data.length), 0);
  head.writeUInt32LE(maskedCrc32c(head.subarray(0, 8)), 8);
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(maskedCrc32c(data), 0);
  return Buffer.concat([head, data, tail]);
}

export interface TensorboardExport {
  /** The event files written, one per stage. */
  files: string[];
  /** Distinct tags written (over all stages). */
  tags: string[];
  /** Events written (one per metrics record with a number in it). */
  events: number;
  /** Records left out: without a stage or a numeric step. */
  skipped: number;
}

/**
 * Writes the run `run` of `runsDir`'s metrics as TensorBoard event files under `outDir/<stage>/`. Wall
 * times are the run's start (status.json's startedAt, else now) plus each record's `time`. Throws an
 * HttpError naming the missing run or an empty metrics file.
 */
export async function exportTensorboard(runsDir: string, run: string, outDir: string): Promise<TensorboardExport> {
  const root = await realpath(runsDir).catch(() => {
    throw new HttpError(404, `the runs folder ${runsDir} does not exist`);
  });
  const { records, startedAt } = await readAllMetrics(root, run);
  if (records.length === 0) throw new HttpError(404, `the run "${run}" has no metrics yet (metrics.jsonl is absent or empty): nothing to export`);
  const start = (startedAt ?? Date.now()) / 1000;
  const byStage = new Map<string, Buffer[]>();
  const tags = new Set<string>();
  let events = 0;
  let skipped = 0;
  for (const record of records) {
    const { stage, step, time } = record;
    if (typeof stage !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$/.test(stage) || typeof step !== "number" || !Number.isFinite(step)) {
      skipped++;
      continue;
    }
    const values: [string, number][] = [];
    for (const [tag, v] of Object.entries(flattenRecord(record))) {
      if (tag === "stage" || tag === "step" || tag === "time" || typeof v !== "number" || !Number.isFinite(v)) continue;
      values.push([tag, v]);
      tags.add(tag);
    }
    if (values.length === 0) continue;
    let out = byStage.get(stage);
    if (!out) {
      out = [tfRecord(encodeEvent({ wallTime: start, step: 0, fileVersion: "brain.Event:2" }))];
      byStage.set(stage, out);
    }
    out.push(tfRecord(encodeEvent({ wallTime: start + (typeof time === "number" && Number.isFinite(time) ? time : 0), step, values })));
    events++;
  }
  const files: string[] = [];
  for (const [stage, out] of byStage) {
    const dir = join(outDir, stage);
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `events.out.tfevents.${Math.floor(start)}.sinkflex`);
    writeFileSync(file, Buffer.concat(out));
    files.push(file);
  }
  return { files, tags: [...tags].sort(), events, skipped };
}
