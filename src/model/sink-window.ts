/**
 * The sink-window mask as it travels with a checkpoint and as a run's config chooses it.
 *
 * Every checkpoint sinkflex writes holds `sinkflex_attention.json` beside `config.json` (Hugging Face
 * tools ignore it): the window and sink slots the policy was trained with, { window: 0, sinks: 0 } for
 * full attention. Every loader reads it back through `resolveSinkWindow`, so a policy is served,
 * evaluated and resumed with the mask it was trained with; settings given explicitly that differ from
 * the file are refused, naming both. A folder without the file (a Hugging Face checkpoint, or one written
 * before the file existed) loads with the given settings, or full attention.
 *
 * This file checks, describes, parses and compares settings; the file I/O is the checkpoint's (checkpoint.ts).
 * Masks built from the settings (document ids, pinned positions, eviction) are the attention module's.
 */
import type { SinkWindow } from "../kernels/kernels.js";

export type { SinkWindow };

export class MaskError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MaskError";
  }
}

/** Checks K and W (integers >= 0) and returns them normalized (an infinite window becomes 0). */
export function checkMaskConfig(cfg: SinkWindow): SinkWindow {
  const window = cfg.window === Infinity ? 0 : cfg.window;
  if (!(Number.isInteger(cfg.sinks) && cfg.sinks >= 0)) {
    throw new MaskError(`sinks (K) must be an integer >= 0, got ${cfg.sinks}`);
  }
  if (!(Number.isInteger(window) && window >= 0)) {
    throw new MaskError(`window (W) must be an integer >= 0 (0 = no window), got ${cfg.window}`);
  }
  return { sinks: cfg.sinks, window };
}

/** The file, beside config.json, that holds a checkpoint's sink-window settings. */
export const SINK_WINDOW_FILE = "sinkflex_attention.json";
/** The `format` field of that file. */
export const SINK_WINDOW_FORMAT = "sinkflex-sink-window-v1";

/** The attention a run's config chooses: full attention, or the sink-window mask with its settings. */
export const ATTENTION_MODES = ["full", "sink-window"] as const;
export type AttentionMode = (typeof ATTENTION_MODES)[number];
/** A config's attention section: the mode, and the sink-window settings it uses in "sink-window" mode. */
export interface AttentionChoice extends SinkWindow {
  mode: AttentionMode;
}

/** The settings a choice runs with: its sink window, or undefined for "full" (the checkpoint's own, else full attention). */
export function sinkWindowOf(choice: AttentionChoice): SinkWindow | undefined {
  return choice.mode === "sink-window" ? checkMaskConfig({ window: choice.window, sinks: choice.sinks }) : undefined;
}

/** "sink-window attention (window 512, sinks 4)" or "full attention (window 0, sinks 0)". */
export function describeSinkWindow(sw: SinkWindow): string {
  const kind = sw.window === 0 ? "full attention" : "sink-window attention";
  return `${kind} (window ${sw.window}, sinks ${sw.sinks})`;
}

/** The JSON record written to SINK_WINDOW_FILE. */
export function sinkWindowRecord(sw: SinkWindow): { format: string; window: number; sinks: number } {
  const { window, sinks } = checkMaskConfig(sw);
  return { format: SINK_WINDOW_FORMAT, window, sinks };
}

/** Parses a SINK_WINDOW_FILE record (`where` names the file in errors). */
export function parseSinkWindowRecord(json: unknown, where: string): SinkWindow {
  const r = json as Record<string, unknown> | null;
  if (r === null || typeof r !== "object" || r.format !== SINK_WINDOW_FORMAT) {
    throw new MaskError(`${where}: not a sink-window settings file (expected "format": "${SINK_WINDOW_FORMAT}"); rewrite it as {"format": "${SINK_WINDOW_FORMAT}", "window": W, "sinks": K} or remove it to load with full attention`);
  }
  if (typeof r.window !== "number" || typeof r.sinks !== "number") {
    throw new MaskError(`${where}: "window" and "sinks" must be numbers, got ${JSON.stringify(r.window)} and ${JSON.stringify(r.sinks)}`);
  }
  try {
    return checkMaskConfig({ window: r.window, sinks: r.sinks });
  } catch (e) {
    throw new MaskError(`${where}: ${(e as Error).message}`);
  }
}

/**
 * The settings a loader uses: the checkpoint's (`saved`, null when it has no SINK_WINDOW_FILE) unless
 * settings are given; given settings that differ from the saved ones are an error naming both. Neither:
 * full attention. `where` names the checkpoint in the error.
 */
export function resolveSinkWindow(saved: SinkWindow | null, given: SinkWindow | undefined, where: string): SinkWindow {
  const want = given === undefined ? undefined : checkMaskConfig(given);
  if (saved && want && (saved.window !== want.window || saved.sinks !== want.sinks)) {
    throw new MaskError(
      `${where} was trained with ${describeSinkWindow(saved)} (its ${SINK_WINDOW_FILE}), but ${describeSinkWindow(want)} was asked for; ` +
        `load it without attention settings to use the checkpoint's, or ask for window ${saved.window}, sinks ${saved.sinks}`,
    );
  }
  return want ?? saved ?? { window: 0, sinks: 0 };
}
