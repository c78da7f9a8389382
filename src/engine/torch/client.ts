/**
 * A connection to a torch worker (python -m sinkflex_worker): sends request frames (frames.ts) over a Unix
 * socket or TCP and matches the answers, which come back in request order. Requests are pipelined: a
 * caller may send without waiting (`send`), and the worker runs them in order. When the connection ends
 * while requests are open, each is rejected with an error naming what happened (the worker's exit, or
 * the socket error), with the worker's last stderr lines when the launcher knows them.
 *
 * This file does not know the engine's types or start processes (launcher.ts).
 */
import { connect, type Socket } from "node:net";
import { encodeFrame, FrameReader, PROTOCOL_VERSION, type Frame, type FrameArray, type FrameHeader } from "./frames.js";

export class TorchWorkerError extends Error {
  constructor(message: string, readonly kind: "request" | "internal" | "connection" = "request") {
    super(message);
    this.name = "TorchWorkerError";
  }
}

/** Where a worker listens: `unix:/path/to.sock`, `tcp://host:port`, or a bare `/path/to.sock`. */
export type WorkerAddress = { kind: "unix"; path: string } | { kind: "tcp"; host: string; port: number };

export function parseWorkerAddress(url: string): WorkerAddress {
  if (url.startsWith("unix:")) return { kind: "unix", path: url.slice("unix:".length) };
  if (url.startsWith("/")) return { kind: "unix", path: url };
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d+)\/?$/.exec(url);
  if (m) {
    const port = Number(m[2]);
    if (port >= 1 && port <= 65535) return { kind: "tcp", host: m[1]!.replace(/^\[|\]$/g, ""), port };
  }
  throw new TorchWorkerError(`engine url ${JSON.stringify(url)} is not a worker address; use unix:/path/to.sock or tcp://host:port`);
}

interface Pending {
  op: string;
  resolve: (f: Frame) => void;
  reject: (e: Error) => void;
}

export interface WorkerInfo {
  protocol: number;
  pid: number;
  torch: string;
  transformers: string;
  device: string;
}

export class WorkerClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly reader = new FrameReader();
  private ended: Error | null = null;
  private ending: Promise<void> | null = null;
  /**
   * Says why the connection ended, when someone knows better than the socket (the launcher: the worker's
   * exit status and last stderr lines; it may wait a moment for the process to be reaped).
   */
  explainEnd: () => Promise<string | undefined> = async () => undefined;
  /** Milliseconds the worker spent running this connection's ops (each answer's `ms`), for the transport's share. */
  workerMs = 0;

  private constructor(private readonly socket: Socket, readonly address: string) {
    socket.on("data", (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = this.reader.push(chunk);
      } catch (e) {
        this.fail(`the worker at ${address} sent a malformed frame (${(e as Error).message})`, undefined);
        socket.destroy();
        return;
      }
      for (const f of frames) this.answer(f);
    });
    socket.on("error", (e) => this.end(`the connection to the worker at ${address} failed: ${e.message}`));
    socket.on("close", () => this.end(`the worker at ${address} closed the connection`));
  }

  /** Connects and says hello (with `token` when the worker needs one). */
  static async connect(url: string, opts: { token?: string; timeoutMs?: number } = {}): Promise<{ client: WorkerClient; info: WorkerInfo }> {
    const addr = parseWorkerAddress(url);
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = addr.kind === "unix" ? connect(addr.path) : connect(addr.port, addr.host);
      const timer = setTimeout(() => {
        s.destroy();
        reject(new TorchWorkerError(`no torch worker answered at ${url} within ${opts.timeoutMs ?? 10_000} ms`, "connection"));
      }, opts.timeoutMs ?? 10_000);
      s.once("connect", () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once("error", (e) => {
        clearTimeout(timer);
        reject(new TorchWorkerError(`cannot connect to the torch worker at ${url}: ${e.message}; is it running (python -m sinkflex_worker)?`, "connection"));
      });
    });
    if (addr.kind === "tcp") socket.setNoDelay(true);
    const client = new WorkerClient(socket, url);
    const { header } = await client.call("hello", { token: opts.token, protocol: PROTOCOL_VERSION });
    if (header.protocol !== PROTOCOL_VERSION) {
      client.close();
      throw new TorchWorkerError(`the worker at ${url} speaks protocol ${String(header.protocol)}, this sinkflex speaks ${PROTOCOL_VERSION}; install the matching python/ package`, "connection");
    }
    return { client, info: header as unknown as WorkerInfo };
  }

  /** Sends a request and waits for its answer; a worker error rejects with its message. */
  call(op: string, header: FrameHeader = {}, arrays: Record<string, FrameArray> = {}): Promise<Frame> {
    if (this.ended) return Promise.reject(this.ended);
    if (this.ending) return this.ending.then(() => Promise.reject(this.ended!));
    const id = this.nextId++;
    const done = new Promise<Frame>((resolve, reject) => this.pending.set(id, { op, resolve, reject }));
    this.socket.write(encodeFrame({ ...header, op, id }, arrays));
    return done;
  }

  /** Closes the connection; open requests are rejected. */
  close(): void {
    this.fail("the connection to the torch worker was closed by this process", undefined);
    this.socket.destroy();
  }

  get closed(): boolean {
    return this.ended !== null || this.ending !== null;
  }

  private answer(f: Frame): void {
    const id = f.header.id as number;
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (typeof f.header.ms === "number") this.workerMs += f.header.ms;
    if (f.header.ok === true) p.resolve(f);
    else {
      const kind = f.header.kind === "internal" ? "internal" : "request";
      p.reject(new TorchWorkerError(`torch worker, ${p.op}: ${String(f.header.error)}`, kind));
    }
  }

  private end(what: string): void {
    if (this.ended || this.ending) return;
    this.ending = this.explainEnd().then((why) => this.fail(what, why), () => this.fail(what, undefined));
  }

  private fail(what: string, why: string | undefined): void {
    if (!this.ended) this.ended = new TorchWorkerError(why ? `${what}: ${why}` : what, "connection");
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.reject(new TorchWorkerError(`${this.ended.message} (during ${p.op})`, "connection"));
    }
  }
}
