/**
 * The safetensors file format: read and write named tensors (F32, BF16, F16 on disk; always f32 in
 * memory), single files and sharded sets with `model.safetensors.index.json`.
 *
 * This file knows bytes and dtypes only. It does not know which names a model has (see weights.ts) nor
 * the checkpoint folder layout (see checkpoint.ts). Writes here are plain; atomicity is the caller's.
 */
import { closeSync, existsSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { basename, join } from "node:path";

export type StDtype = "F32" | "BF16" | "F16";

/** A named tensor in memory: row-major f32 data with its shape. */
export interface NamedTensor {
  shape: number[];
  data: Float32Array;
}

export type TensorMap = Map<string, NamedTensor>;

/** A tensor to write: f32 values, or bfloat16 bits (a Uint16Array, written as is under BF16). */
export interface WritableTensor {
  shape: number[];
  data: Float32Array | Uint16Array;
}

export class SafetensorsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SafetensorsError";
  }
}

const BYTES: Record<StDtype, number> = { F32: 4, BF16: 2, F16: 2 };

// ---- dtype conversions -------------------------------------------------------------------------------

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 -> bf16 bits, round to nearest even (NaN stays NaN). */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x40) & 0xffff;
  const rounded = bits + 0x7fff + ((bits >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0]!;
}

/** f32 -> IEEE half bits, round to nearest even, with subnormals, overflow to infinity. */
export function f32ToF16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && (m & 1))) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (m & 1))) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function decode(bytes: Uint8Array, dtype: StDtype, count: number, dest?: Float32Array): Float32Array {
  const out = dest ?? new Float32Array(count);
  if (dtype === "F32") {
    new Uint8Array(out.buffer, out.byteOffset, count * 4).set(bytes.subarray(0, count * 4));
    return out;
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === "BF16") {
    const o32 = new Uint32Array(out.buffer, out.byteOffset, count);
    for (let i = 0; i < count; i++) o32[i] = dv.getUint16(2 * i, true) << 16;
  } else {
    for (let i = 0; i < count; i++) out[i] = f16ToF32(dv.getUint16(2 * i, true));
  }
  return out;
}

function encode(held: Float32Array | Uint16Array, dtype: StDtype): Uint8Array {
  if (held instanceof Uint16Array && dtype === "BF16") return new Uint8Array(held.buffer, held.byteOffset, held.byteLength);
  const data = held instanceof Uint16Array ? decode(new Uint8Array(held.buffer, held.byteOffset, held.byteLength), "BF16", held.length) : held;
  if (dtype === "F32") return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(data.length * 2);
  const dv = new DataView(out.buffer);
  const conv = dtype === "BF16" ? f32ToBf16 : f32ToF16;
  for (let i = 0; i < data.length; i++) dv.setUint16(2 * i, conv(data[i]!), true);
  return out;
}

// ---- single files ---------------------------------------------------------------------------------------

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Reads the header of a safetensors file: tensor names, dtypes, shapes, offsets and metadata. */
export function readSafetensorsHeader(path: string): {
  entries: Map<string, HeaderEntry>;
  metadata: Record<string, string>;
  dataStart: number;
} {
  const fd = openSync(path, "r");
  try {
    const lenBuf = Buffer.alloc(8);
    if (readSync(fd, lenBuf, 0, 8, 0) !== 8) throw new SafetensorsError(`${path}: file too short to be safetensors`);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (n > 100_000_000) throw new SafetensorsError(`${path}: header length ${n} is implausible; the file is not safetensors`);
    const hBuf = Buffer.alloc(n);
    if (readSync(fd, hBuf, 0, n, 8) !== n) throw new SafetensorsError(`${path}: truncated header`);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(hBuf.toString("utf8"));
    } catch (e) {
      throw new SafetensorsError(`${path}: header is not valid JSON (${(e as Error).message})`);
    }
    const entries = new Map<string, HeaderEntry>();
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(header)) {
      if (name === "__metadata__") {
        metadata = (v ?? {}) as Record<string, string>;
        continue;
      }
      entries.set(name, v as HeaderEntry);
    }
    return { entries, metadata, dataStart: 8 + n };
  } finally {
    closeSync(fd);
  }
}

/**
 * Where a reader may put a tensor: a Float32Array of exactly the tensor's size to decode into (so large
 * checkpoints are not held twice), or undefined for a new array.
 */
export type TensorDestination = (name: string, shape: number[]) => Float32Array | undefined;

/** Reads every tensor of a safetensors file (or only `names`) into f32. */
export function readSafetensors(path: string, names?: Iterable<string>, into?: TensorDestination): TensorMap {
  const out: TensorMap = new Map();
  forEachTensor(path, names, (name, shape, bytes, dtype, count) => {
    const dest = into?.(name, shape);
    if (dest && dest.length !== count) throw new SafetensorsError(`tensor "${name}": destination has ${dest.length} floats, the file ${count}`);
    out.set(name, { shape, data: decode(bytes, dtype, count, dest) });
  });
  return out;
}

/**
 * Where `readSafetensorsBf16` puts a tensor: a Uint16Array of exactly its size, which receives its values as
 * bfloat16 bits, or undefined to skip it.
 */
export type Bf16Destination = (name: string, shape: number[]) => Uint16Array | undefined;

/**
 * Reads tensors of a safetensors file as bfloat16 bits into the arrays `into` gives (BF16 on disk is copied
 * as is, with no fp32 step; F32 and F16 are rounded to nearest even); returns the shape of each one read.
 */
export function readSafetensorsBf16(path: string, into: Bf16Destination, names?: Iterable<string>): Map<string, number[]> {
  const out = new Map<string, number[]>();
  let dest: Uint16Array | undefined;
  // A skipped tensor is not read; a BF16 one is read straight into its destination.
  const readInto = (name: string, shape: number[], dtype: StDtype, count: number): Uint8Array | null | undefined => {
    dest = into(name, shape);
    if (!dest) return null;
    if (dest.length !== count) throw new SafetensorsError(`tensor "${name}": destination has ${dest.length} values, the file ${count}`);
    return dtype === "BF16" ? new Uint8Array(dest.buffer, dest.byteOffset, count * 2) : undefined;
  };
  forEachTensor(path, names, (name, shape, bytes, dtype, count) => {
    if (dtype !== "BF16") {
      const f = decode(bytes, dtype, count);
      for (let i = 0; i < count; i++) dest![i] = f32ToBf16(f[i]!);
    }
    out.set(name, shape);
  }, readInto);
  return out;
}

/** The files of a checkpoint folder with the tensor names each holds (null: every tensor of the one file). */
export function safetensorsFiles(dir: string): { path: string; names: string[] | null }[] {
  const indexPath = join(dir, INDEX_FILE);
  if (existsSync(indexPath)) {
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as { weight_map?: Record<string, string> };
    if (!index.weight_map) throw new SafetensorsError(`${indexPath}: no "weight_map"; the index is malformed`);
    const byFile = new Map<string, string[]>();
    for (const [name, file] of Object.entries(index.weight_map)) {
      if (!byFile.has(file)) byFile.set(file, []);
      byFile.get(file)!.push(name);
    }
    return [...byFile].map(([file, names]) => {
      const p = join(dir, file);
      if (!existsSync(p)) throw new SafetensorsError(`${indexPath} lists shard ${file}, which is missing from ${dir}`);
      return { path: p, names };
    });
  }
  const single = join(dir, SINGLE_FILE);
  if (!existsSync(single)) {
    throw new SafetensorsError(`${dir}: neither ${SINGLE_FILE} nor ${INDEX_FILE} found; is this a Hugging Face checkpoint folder?`);
  }
  return [{ path: single, names: null }];
}

/**
 * Calls `fn` with each tensor (or each of `names`) of a file, one at a time: its shape, bytes, dtype and
 * element count (checked against the shape and the byte range). `readInto`, when given, says where each
 * tensor's bytes go: an array of exactly their size, null to skip the tensor (fn is not called), or
 * undefined for a new buffer.
 */
function forEachTensor(
  path: string, names: Iterable<string> | undefined,
  fn: (name: string, shape: number[], bytes: Uint8Array, dtype: StDtype, count: number) => void,
  readInto?: (name: string, shape: number[], dtype: StDtype, count: number) => Uint8Array | null | undefined,
): void {
  const { entries, dataStart } = readSafetensorsHeader(path);
  const want = names ? new Set(names) : undefined;
  const fd = openSync(path, "r");
  try {
    for (const [name, e] of entries) {
      if (want && !want.has(name)) continue;
      const dtype = e.dtype as StDtype;
      if (!(dtype in BYTES)) {
        throw new SafetensorsError(`${path}: tensor "${name}" has dtype ${e.dtype}; sinkflex reads F32, BF16 and F16 only`);
      }
      const count = e.shape.reduce((a, b) => a * b, 1);
      const [b0, b1] = e.data_offsets;
      if (b1 - b0 !== count * BYTES[dtype]) {
        throw new SafetensorsError(`${path}: tensor "${name}" byte range ${b0}..${b1} does not match shape ${JSON.stringify(e.shape)} ${dtype}`);
      }
      const target = readInto?.(name, [...e.shape], dtype, count);
      if (target === null) continue;
      const buf = target ?? Buffer.alloc(b1 - b0);
      let got = 0;
      while (got < buf.length) {
        const r = readSync(fd, buf, got, buf.length - got, dataStart + b0 + got);
        if (r <= 0) throw new SafetensorsError(`${path}: tensor "${name}" is truncated; the file is incomplete`);
        got += r;
      }
      fn(name, [...e.shape], buf, dtype, count);
    }
  } finally {
    closeSync(fd);
  }
}

/** Writes tensors to one safetensors file in the given on-disk dtype. */
export function writeSafetensors(
  path: string,
  tensors: Iterable<[string, WritableTensor]>,
  dtype: StDtype = "F32",
  metadata: Record<string, string> = { format: "pt" },
): number {
  const list = [...tensors];
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of list) {
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) {
      throw new SafetensorsError(`tensor "${name}": shape ${JSON.stringify(t.shape)} does not match ${t.data.length} values`);
    }
    const n = count * BYTES[dtype];
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let hJson = JSON.stringify(header);
  const pad = (8 - (Buffer.byteLength(hJson) % 8)) % 8;
  hJson += " ".repeat(pad);
  const hBuf = Buffer.from(hJson, "utf8");
  const lenBuf = Buffer.alloc(8);
  lenBuf.writeBigUInt64LE(BigInt(hBuf.length));
  const fd = openSync(path, "w");
  try {
    writeSync(fd, lenBuf);
    writeSync(fd, hBuf);
    for (const [, t] of list) {
      const bytes = encode(t.data, dtype);
      let done = 0;
      while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
    }
  } finally {
    closeSync(fd);
  }
  return offset;
}

// ---- sharded sets -----------------------------------------------------------------------------------------

export const SINGLE_FILE = "model.safetensors";
export const INDEX_FILE = "model.safetensors.index.json";

/** Reads all weights of a folder: `model.safetensors`, or the shards listed in `model.safetensors.index.json`. */
export function readSafetensorsDir(dir: string, into?: TensorDestination): TensorMap {
  const files = safetensorsFiles(dir);
  const only = files[0]!;
  if (only.names === null) return readSafetensors(only.path, undefined, into);
  const out: TensorMap = new Map();
  for (const { path, names } of files) {
    const part = readSafetensors(path, names!, into);
    for (const n of names!) {
      const t = part.get(n);
      if (!t) throw new SafetensorsError(`${join(dir, INDEX_FILE)} maps "${n}" to ${basename(path)}, but that shard does not hold it`);
      out.set(n, t);
    }
  }
  return out;
}

/**
 * Writes tensors into `dir` as one `model.safetensors`, or, when they exceed `maxShardBytes`, as
 * `model-0000i-of-0000n.safetensors` shards plus `model.safetensors.index.json`. Returns the file names.
 */
export function writeSafetensorsDir(
  dir: string,
  tensors: Map<string, WritableTensor>,
  opts: { dtype?: StDtype; maxShardBytes?: number } = {},
): string[] {
  const dtype = opts.dtype ?? "F32";
  const max = opts.maxShardBytes ?? Infinity;
  const shards: [string, WritableTensor][][] = [[]];
  let cur = 0;
  let total = 0;
  for (const entry of tensors) {
    const n = entry[1].data.length * BYTES[dtype];
    if (cur > 0 && cur + n > max) {
      shards.push([]);
      cur = 0;
    }
    shards[shards.length - 1]!.push(entry);
    cur += n;
    total += n;
  }
  if (shards.length === 1) {
    writeSafetensors(join(dir, SINGLE_FILE), shards[0]!, dtype);
    return [SINGLE_FILE];
  }
  const files: string[] = [];
  const weightMap: Record<string, string> = {};
  const pad = (i: number) => String(i).padStart(5, "0");
  shards.forEach((s, i) => {
    const file = `model-${pad(i + 1)}-of-${pad(shards.length)}.safetensors`;
    writeSafetensors(join(dir, file), s, dtype);
    for (const [name] of s) weightMap[name] = file;
    files.push(file);
  });
  const index = { metadata: { total_size: total }, weight_map: weightMap };
  writeFileJson(join(dir, INDEX_FILE), index);
  files.push(INDEX_FILE);
  return files;
}

function writeFileJson(path: string, value: unknown): void {
  const fd = openSync(path, "w");
  try {
    writeSync(fd, JSON.stringify(value, null, 2) + "\n");
  } finally {
    closeSync(fd);
  }
}
