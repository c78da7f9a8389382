/**
 * Binary frames of the torch worker protocol (python/README.md): an 8-byte prefix (header length, body
 * length; uint32 little-endian), a JSON header for the op name and scalars, then raw little-endian int32 /
 * float32 arrays named in the header's "arrays" list. Encoding and incremental decoding only; this file
 * does not open sockets or know the ops.
 */

import { endianness } from "node:os";

export const PROTOCOL_VERSION = 1;
const LITTLE_ENDIAN = endianness() === "LE";
export const MAX_HEADER_BYTES = 1 << 20;
export const MAX_BODY_BYTES = 2 ** 31;

export type FrameArray = Int32Array | Float32Array;
export type FrameHeader = Record<string, unknown>;

export interface Frame {
  header: FrameHeader;
  arrays: Map<string, FrameArray>;
}

export class FrameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FrameError";
  }
}

/** One frame: `header` (without "arrays") and named arrays, in the order given. */
export function encodeFrame(header: FrameHeader, arrays: Record<string, FrameArray> = {}): Buffer {
  const specs: [string, "i32" | "f32", number][] = [];
  let bodyLen = 0;
  for (const [name, a] of Object.entries(arrays)) {
    specs.push([name, a instanceof Int32Array ? "i32" : "f32", a.length]);
    bodyLen += a.length * 4;
  }
  const hb = Buffer.from(JSON.stringify({ ...header, arrays: specs }), "utf8");
  if (hb.length > MAX_HEADER_BYTES) throw new FrameError(`the header is ${hb.length} bytes, over ${MAX_HEADER_BYTES}`);
  const out = Buffer.allocUnsafe(8 + hb.length + bodyLen);
  out.writeUInt32LE(hb.length, 0);
  out.writeUInt32LE(bodyLen, 4);
  hb.copy(out, 8);
  let off = 8 + hb.length;
  for (const a of Object.values(arrays)) {
    if (LITTLE_ENDIAN) {
      Buffer.from(a.buffer, a.byteOffset, a.byteLength).copy(out, off);
      off += a.byteLength;
      continue;
    }
    for (let i = 0; i < a.length; i++, off += 4) {
      if (a instanceof Int32Array) out.writeInt32LE(a[i]!, off);
      else out.writeFloatLE(a[i]!, off);
    }
  }
  return out;
}

/** Splits a byte stream into frames; `push` returns the frames completed by a chunk. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private have = 0;

  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.have += chunk.length;
    const out: Frame[] = [];
    while (this.have >= 8) {
      const head = this.peek(8);
      const hl = head.readUInt32LE(0);
      const bl = head.readUInt32LE(4);
      if (hl === 0 || hl > MAX_HEADER_BYTES) throw new FrameError(`header length ${hl} is outside 1..${MAX_HEADER_BYTES}`);
      if (bl > MAX_BODY_BYTES) throw new FrameError(`body length ${bl} is over ${MAX_BODY_BYTES}`);
      if (this.have < 8 + hl + bl) break;
      const all = this.take(8 + hl + bl);
      out.push(decodeFrame(all.subarray(8, 8 + hl), all.subarray(8 + hl)));
    }
    return out;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.have = rest.length;
    return all.subarray(0, n);
  }
}

function decodeFrame(hb: Buffer, body: Buffer): Frame {
  let header: unknown;
  try {
    header = JSON.parse(hb.toString("utf8"));
  } catch (e) {
    throw new FrameError(`the header is not JSON: ${(e as Error).message}`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) throw new FrameError("the header must be a JSON object");
  const h = header as FrameHeader;
  const specs = h.arrays ?? [];
  delete h.arrays;
  if (!Array.isArray(specs)) throw new FrameError('"arrays" must be a list of [name, dtype, count]');
  const arrays = new Map<string, FrameArray>();
  let off = 0;
  for (const spec of specs as unknown[]) {
    if (!Array.isArray(spec) || spec.length !== 3 || typeof spec[0] !== "string" || (spec[1] !== "i32" && spec[1] !== "f32") ||
      !Number.isInteger(spec[2]) || (spec[2] as number) < 0) {
      throw new FrameError(`bad array spec ${JSON.stringify(spec)}; expected [name, "i32"|"f32", count >= 0]`);
    }
    const [name, kind, n] = spec as [string, "i32" | "f32", number];
    if (off + 4 * n > body.length) throw new FrameError(`array ${name} needs ${4 * n} bytes at offset ${off}; the body has ${body.length}`);
    const a = kind === "i32" ? new Int32Array(n) : new Float32Array(n);
    if (LITTLE_ENDIAN) Buffer.from(a.buffer, a.byteOffset, a.byteLength).set(body.subarray(off, off + 4 * n));
    else for (let i = 0; i < n; i++) a[i] = kind === "i32" ? body.readInt32LE(off + 4 * i) : body.readFloatLE(off + 4 * i);
    arrays.set(name, a);
    off += 4 * n;
  }
  if (off !== body.length) throw new FrameError(`the body has ${body.length - off} bytes that no array describes`);
  return { header: h, arrays };
}
