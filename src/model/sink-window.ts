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
import type { SinkWindow } from "../kernels/index.js";

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
/**
 * The file, beside SINK_WINDOW_FILE, that holds the sink profile a policy was laid out with
 * (`attention.mode: profile`). The model module keeps it as an opaque JSON record; src/attention
 * validates and reads it (`parseProfile`).
 */
export const SINK_PROFILE_FILE = "sinkflex_sink_profile.json";

/**
 * The attention a run's config chooses: full attention, the sink-window mask with its settings, or
 * "profile": the sink-window mask with its sink slots laid out from the model's own probed sinks.
 */
export const ATTENTION_MODES = ["full", "sink-window", "profile"] as const;
export type AttentionMode = (typeof ATTENTION_MODES)[number];
/** A config's attention section: the mode, the sink-window settings, and the profile mode's and sink logit's settings. */
export interface AttentionChoice extends SinkWindow {
  mode: AttentionMode;
  /** "profile": a saved SinkProfile to lay the slots out from, instead of probing the policy. */
  profile?: string | undefined;
  /** "profile": most slots beyond `sinks` added to cover the profile's position sinks. */
  pinBudget: number;
  /** "profile": re-probe every N GRPO steps (0 = never). */
  reprobeEvery: number;
  /** Conversations probed (and used to initialize the sink logit). */
  probeSequences: number;
  /** Adds the learnable per-head sink logit, initialized so the outputs are unchanged. */
  sinkLogit: boolean;
}

/**
 * The settings a choice runs with: its sink window, or undefined for "full" (the checkpoint's own, else
 * full attention) and for "profile" (the layout comes from the probe: src/pipeline/stages/attention-profile.ts).
 */
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
