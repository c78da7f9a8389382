/**
 * The SinkProfile: where a model puts its attention sinks, per layer, as measured by the probe
 * (probe.ts), and its JSON file and table forms. The rewriter (rewriter.ts) reads it.
 *
 * This file holds types, validation and formatting only; it runs no model.
 */
import { readFileSync, writeFileSync } from "node:fs";

export const SINK_PROFILE_FORMAT = "sinkflex-sink-profile-v1";

/** A key position that is a sink of a layer (measured over every probed sequence long enough to have it). */
export interface PositionSink {
  position: number;
  /** The most common token id at this position in the probed sequences. */
  tokenId: number;
  /** Mean attention mass the layer's heads give this key (mean over heads of α(l, h, k)). */
  mass: number;
  /** The heads with α(l, h, k) >= the threshold. */
  heads: number[];
}

/** A token id that is a sink wherever it occurs (a secondary sink, not tied to a position). */
export interface TokenSink {
  tokenId: number;
  /** Occurrences the probe could measure (positions with at least one query delta or more tokens later). */
  occurrences: number;
  /** Occurrences at which the layer depended on it. */
  sinkOccurrences: number;
  /** Mean over those occurrences of the mean-over-heads mass. */
  mass: number;
}

export interface LayerSinks {
  layer: number;
  positions: PositionSink[];
  tokens: TokenSink[];
}

export interface SinkProfile {
  format: typeof SINK_PROFILE_FORMAT;
  /** Free-form description of the model (e.g. the checkpoint folder). */
  model: string;
  numLayers: number;
  numHeads: number;
  settings: {
    /** δ: only queries i >= k + delta count toward key k. */
    delta: number;
    /** A head depends on key k when α(l, h, k) >= threshold. */
    threshold: number;
    /** k is a sink of layer l when at least this fraction of the layer's heads depend on it. */
    headFraction: number;
    /** Query rows sampled per sequence (per layer and head). */
    queries: number;
  };
  sequences: number;
  tokens: number;
  layers: LayerSinks[];
  /** Layers with neither position nor token sinks. */
  layersWithoutSinks: number[];
  /** The most common token ids at positions 0, 1, ... of the probed sequences: the model's natural prefix. */
  prefix: number[];
}

export class ProfileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProfileError";
  }
}

/** Sink positions found in any layer, sorted, without duplicates. */
export function sinkPositions(p: SinkProfile): number[] {
  return [...new Set(p.layers.flatMap((l) => l.positions.map((s) => s.position)))].sort((a, b) => a - b);
}

/** Secondary sink token ids, strongest first (largest mass over the layers they appear in). */
export function secondarySinkTokens(p: SinkProfile): { tokenId: number; mass: number }[] {
  const best = new Map<number, number>();
  for (const l of p.layers) for (const t of l.tokens) best.set(t.tokenId, Math.max(best.get(t.tokenId) ?? 0, t.mass));
  return [...best].map(([tokenId, mass]) => ({ tokenId, mass })).sort((a, b) => b.mass - a.mass || a.tokenId - b.tokenId);
}

export function writeProfile(path: string, p: SinkProfile): void {
  writeFileSync(path, `${JSON.stringify(p, null, 2)}\n`);
}

export function readProfile(path: string): SinkProfile {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ProfileError(`${path}: not a readable JSON file (${(e as Error).message}); write one with \`sinkflex sinks probe <checkpoint> --out ${path}\``);
  }
  return parseProfile(json, path);
}

/** Checks a parsed JSON value is a SinkProfile (`where` names its file in errors). */
export function parseProfile(json: unknown, where: string): SinkProfile {
  const p = json as SinkProfile;
  if (!p || p.format !== SINK_PROFILE_FORMAT || !Array.isArray(p.layers) || !Array.isArray(p.prefix)) {
    throw new ProfileError(`${where}: not a sink profile (format ${JSON.stringify((p as { format?: unknown })?.format)}, expected ${SINK_PROFILE_FORMAT})`);
  }
  if (!Number.isInteger(p.numLayers) || !Number.isInteger(p.numHeads) || p.layers.length !== p.numLayers) {
    throw new ProfileError(`${where}: numLayers ${p.numLayers}, numHeads ${p.numHeads} and ${p.layers.length} layer entries do not agree; probe the model again`);
  }
  return p;
}

/**
 * Refuses a profile measured on another model: its layer and head counts must be the model's. `where`
 * names the profile (a file) in the error.
 */
export function checkProfileFits(p: SinkProfile, model: { numLayers: number; numHeads: number }, where: string): SinkProfile {
  if (p.numLayers !== model.numLayers || p.numHeads !== model.numHeads) {
    throw new ProfileError(
      `${where} was probed on a model with ${p.numLayers} layers x ${p.numHeads} heads (${p.model}), but this model has ` +
        `${model.numLayers} layers x ${model.numHeads} heads; probe this model (\`sinkflex sinks probe <checkpoint> --out FILE\`) or drop attention.profile to probe it in the run`,
    );
  }
  return p;
}

/**
 * What moved between two profiles of one model: per layer, the position sinks and token sinks that
 * appeared or went away, and a changed natural prefix. Empty when nothing moved (masses may differ).
 */
export function profileChanges(before: SinkProfile, after: SinkProfile): string[] {
  const out: string[] = [];
  const n = Math.max(before.layers.length, after.layers.length);
  for (let l = 0; l < n; l++) {
    const a = before.layers[l];
    const b = after.layers[l];
    const pa = new Set(a?.positions.map((s) => s.position) ?? []);
    const pb = new Set(b?.positions.map((s) => s.position) ?? []);
    const ta = new Set(a?.tokens.map((t) => t.tokenId) ?? []);
    const tb = new Set(b?.tokens.map((t) => t.tokenId) ?? []);
    const parts: string[] = [];
    const gone = [...pa].filter((x) => !pb.has(x));
    const came = [...pb].filter((x) => !pa.has(x));
    if (gone.length) parts.push(`position sink ${gone.join(", ")} gone`);
    if (came.length) parts.push(`position sink ${came.join(", ")} new`);
    const tGone = [...ta].filter((x) => !tb.has(x));
    const tCame = [...tb].filter((x) => !ta.has(x));
    if (tGone.length) parts.push(`token sink ${tGone.map((t) => `#${t}`).join(", ")} gone`);
    if (tCame.length) parts.push(`token sink ${tCame.map((t) => `#${t}`).join(", ")} new`);
    if (parts.length) out.push(`layer ${l}: ${parts.join("; ")}`);
  }
  if (before.prefix.join(",") !== after.prefix.join(",")) out.push(`natural prefix ${before.prefix.join(" ")} -> ${after.prefix.join(" ")}`);
  return out;
}

/** The profile as a table, one row per layer. `decode` renders a token id (default: the id). */
export function formatProfile(p: SinkProfile, decode: (id: number) => string = (id) => `#${id}`): string {
  const rows: string[][] = [["layer", "sink positions (token, mass, heads)", "token sinks (token, rate, mass)"]];
  for (const l of p.layers) {
    const pos = l.positions.map((s) => `${s.position} (${decode(s.tokenId)}, ${s.mass.toFixed(2)}, ${s.heads.length}/${p.numHeads})`);
    const tok = l.tokens.map((t) => `${decode(t.tokenId)} (${t.sinkOccurrences}/${t.occurrences}, ${t.mass.toFixed(2)})`);
    rows.push([String(l.layer), pos.join("; ") || "-", tok.join("; ") || "-"]);
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) => r.map((x, c) => x.padEnd(widths[c]!)).join("  ").trimEnd();
  const out = [line(rows[0]!), widths.map((w) => "-".repeat(w)).join("  "), ...rows.slice(1).map(line)];
  const s = p.settings;
  out.push("");
  out.push(`${p.sequences} sequences, ${p.tokens} tokens; delta ${s.delta}, threshold ${s.threshold}, head fraction ${s.headFraction}, ${s.queries} query rows per sequence`);
  out.push(`layers without sinks: ${p.layersWithoutSinks.length ? p.layersWithoutSinks.join(", ") : "none"}`);
  return out.join("\n");
}
