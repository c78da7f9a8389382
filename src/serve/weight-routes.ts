/**
 * The weight-update routes of `sinkflex serve --allow-reload`, with vLLM's paths and bodies, so that a
 * trainer keeps a pool of policy servers in step the same way whether they are vLLM or sinkflex
 * (src/rollout/remote-sampler.ts is the client):
 *   - full weights, vLLM's weight-transfer control plane with its "disk" backend:
 *     POST /init_weight_transfer_engine {init_info}, POST /start_weight_update,
 *     POST /update_weights {update_info: {path}} (an absolute folder with safetensors, loaded between
 *     decoding steps), POST /finish_weight_update {weight_version?}, GET /weight_info, and
 *     POST /reset_prefix_cache (nothing to reset: every request has its own session);
 *   - a LoRA adapter, vLLM's runtime LoRA updating: POST /v1/load_lora_adapter {lora_name, lora_path,
 *     load_inplace?} and POST /v1/unload_lora_adapter {lora_name}.
 * The adapter is merged into the one engine's weights, so this server serves one adapter at a time: a
 * new one replaces the one before (unloading a replaced name succeeds), and while one is loaded requests
 * name it, not the base model.
 *
 * It changes weights through the `WeightLoader` it is given and the batch decoder's `swapWeights`; it
 * reads no checkpoint itself and knows nothing else of the server.
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import type { ServerResponse } from "node:http";
import type { BatchDecoder } from "../rollout/index.js";
import { ApiError, isObject, sendJson, type Json } from "./openai-shapes.js";

/** What loads a checkpoint folder or a PEFT adapter folder into the served weights (the embedded engine's `load`). */
export interface WeightLoader {
  load(dir: string): Promise<void>;
}

const bad = (msg: string, param: string | null = null) => new ApiError(400, msg, "invalid_request_error", param);

function folderWith(path: unknown, param: string, what: (names: string[]) => string | undefined): string {
  if (typeof path !== "string" || path === "") throw bad(`${param} must be a non-empty absolute folder path`, param);
  if (!isAbsolute(path)) throw bad(`${param} must be an absolute folder path, got ${JSON.stringify(path)}`, param);
  if (!existsSync(path) || !statSync(path).isDirectory()) throw bad(`${param} ${JSON.stringify(path)} is not a folder on this server`, param);
  const missing = what(readdirSync(path));
  if (missing) throw bad(`${param} ${JSON.stringify(path)} ${missing}`, param);
  return path;
}

export class WeightRoutes {
  /** The version the last finished update committed (vLLM's weight_version); null before any. */
  weightVersion: string | null = null;
  /** The LoRA adapter served now, and the ones it replaced. */
  adapter: string | undefined;
  private readonly replaced = new Set<string>();
  private session: { loaded: boolean } | undefined;

  constructor(
    private readonly loader: WeightLoader | undefined,
    private readonly decoder: BatchDecoder,
  ) {}

  /** The paths this file answers (the server asks before reading a body). */
  static handles(method: string, path: string): boolean {
    if (method === "GET") return path === "/weight_info";
    return method === "POST" && ["/init_weight_transfer_engine", "/start_weight_update", "/update_weights", "/finish_weight_update", "/reset_prefix_cache", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"].includes(path);
  }

  async handle(method: string, path: string, body: Json, res: ServerResponse): Promise<void> {
    if (!this.loader) {
      throw new ApiError(404, `${method} ${path} changes the served weights, which this server does not allow; start it with sinkflex serve --allow-reload`, "invalid_request_error", null, "not_found");
    }
    switch (path) {
      case "/init_weight_transfer_engine":
        if (!isObject(body.init_info)) throw bad("init_info must be an object ({} for weights loaded from a folder)", "init_info");
        sendJson(res, 200, { message: "Weight transfer initialized" });
        return;
      case "/start_weight_update":
        if (this.session) throw new ApiError(409, "a weight update is already in progress; finish it (POST /finish_weight_update) first", "invalid_request_error");
        this.session = { loaded: false };
        sendJson(res, 200, { message: "Weight update started" });
        return;
      case "/update_weights":
        await this.updateWeights(body);
        sendJson(res, 200, { message: "Weights updated" });
        return;
      case "/finish_weight_update": {
        const s = this.session;
        if (!s) throw bad("no weight update is in progress; POST /start_weight_update first");
        this.session = undefined;
        if (!s.loaded) throw bad("no checkpoint was loaded during this weight update; POST /update_weights {update_info: {path}} before finishing");
        const v = body.weight_version;
        if (v !== undefined && v !== null && typeof v !== "string") throw bad("weight_version must be a string", "weight_version");
        if (typeof v === "string") this.weightVersion = v;
        sendJson(res, 200, { message: "Weight update finished" });
        return;
      }
      case "/weight_info":
        sendJson(res, 200, { weight_version: this.weightVersion });
        return;
      case "/reset_prefix_cache":
        // Every request decodes in a session of its own: no prefix outlives its request.
        res.writeHead(200, { "content-length": 0 });
        res.end();
        return;
      case "/v1/load_lora_adapter":
        await this.loadAdapter(body, res);
        return;
      case "/v1/unload_lora_adapter":
        this.unloadAdapter(body, res);
        return;
    }
  }

  private async updateWeights(body: Json): Promise<void> {
    const s = this.session;
    if (!s) throw bad("start_weight_update must be called before loading a checkpoint");
    if (s.loaded) throw bad("this server loads one checkpoint per weight update; finish this one and start another");
    const info = body.update_info;
    if (!isObject(info)) throw bad("update_info must be an object like {\"path\": \"/abs/checkpoint\"}", "update_info");
    const path = folderWith(info.path, "update_info.path", (names) => (names.some((n) => n.endsWith(".safetensors")) ? undefined : "has no .safetensors files"));
    if (this.adapter) throw bad(`this server serves the LoRA adapter ${JSON.stringify(this.adapter)} merged into its weights; full weights cannot be loaded under it (restart it on the checkpoint)`);
    try {
      await this.decoder.swapWeights(() => this.loader!.load(path));
    } catch (err) {
      this.session = undefined;
      throw bad(`loading ${path} failed: ${(err as Error).message}`, "update_info.path");
    }
    s.loaded = true;
  }

  private async loadAdapter(body: Json, res: ServerResponse): Promise<void> {
    const name = body.lora_name;
    if (typeof name !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/.test(name)) {
      throw bad("lora_name must be a name of letters, digits, '_', '.', ':' or '-' (at most 128)", "lora_name");
    }
    const path = folderWith(body.lora_path, "lora_path", (names) => (names.includes("adapter_config.json") ? undefined : "is not a PEFT LoRA adapter folder (no adapter_config.json)"));
    if (name === this.adapter && body.load_inplace !== true) throw bad(`The lora adapter '${name}' has already been loaded.`, "lora_name");
    try {
      await this.decoder.swapWeights(() => this.loader!.load(path));
    } catch (err) {
      throw bad(`loading the adapter ${path} failed: ${(err as Error).message}`, "lora_path");
    }
    if (this.adapter && this.adapter !== name) this.replaced.add(this.adapter);
    this.replaced.delete(name);
    this.adapter = name;
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    res.end(`Success: LoRA adapter '${name}' added successfully.`);
  }

  private unloadAdapter(body: Json, res: ServerResponse): void {
    const name = body.lora_name;
    if (typeof name !== "string" || name === "") throw bad("lora_name must be the name of a loaded adapter", "lora_name");
    if (name === this.adapter) {
      throw bad(`the adapter '${name}' is merged into the served weights and cannot be unloaded; load another adapter in its place, or restart the server on the base checkpoint`, "lora_name");
    }
    if (!this.replaced.delete(name)) throw new ApiError(404, `The lora adapter '${name}' cannot be found.`, "invalid_request_error", "lora_name", "not_found");
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    res.end(`Success: LoRA adapter '${name}' removed successfully.`);
  }

  /** The model id a request may name: the adapter while one is loaded, else the base model's. */
  checkModel(requested: unknown, base: string): void {
    if (requested === undefined) return;
    if (this.adapter) {
      if (requested === this.adapter) return;
      if (requested === base) {
        throw new ApiError(400, `this server serves the LoRA adapter ${JSON.stringify(this.adapter)} merged into ${JSON.stringify(base)}, so the base model alone is not served; ask for ${JSON.stringify(this.adapter)}`, "invalid_request_error", "model", "model_not_found");
      }
      throw new ApiError(404, `the model ${JSON.stringify(requested)} does not exist; this server serves ${JSON.stringify(this.adapter)}`, "invalid_request_error", "model", "model_not_found");
    }
    if (requested !== base) throw new ApiError(404, `the model ${JSON.stringify(requested)} does not exist; this server serves ${JSON.stringify(base)}`, "invalid_request_error", "model", "model_not_found");
  }
}
