import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
/**
 * The training config's schema (src/pipeline/config.ts): defaults, errors that name the field, config
 * files, and a recipe file's `scale` section.
 */
import { ConfigError, loadConfigFile, referenceGrpo, scaleRecipe, validateConfig } from "../../src/pipeline/config.js";

const minimal = { suites: [{ env: "sinkflex/arith-v0" }], model: { init: {} } };

describe("training config", () => {
  it("fills defaults: the reference GRPO hyperparameters", () => {
    const cfg = validateConfig(minimal);
    expect(cfg.grpo).toMatchObject({ lr: 5e-6, batchTasks: 32, groupSize: 8, klCoef: 0.04, epochs: 3, estimator: "grpo" });
    expect(cfg.grpo).toMatchObject(referenceGrpo());
  });
  it("names the field and the allowed values", () => {
    expect(() => validateConfig({ ...minimal, grpo: { estimator: "ppo" } })).toThrow(/grpo\.estimator: must be one of "grpo", "dr-grpo", "rloo"/);
    expect(() => validateConfig({ ...minimal, grpo: { lr: -1 } })).toThrow(/grpo\.lr/);
    expect(() => validateConfig({ ...minimal, grpo: { learningRate: 1 } })).toThrow(/grpo: unknown field\(s\) "learningRate"/);
    expect(() => validateConfig({ ...minimal, suites: [] })).toThrow(/suites: list at least one suite/);
    expect(() => validateConfig({ ...minimal, model: {} })).toThrow(/model: set exactly one of model.checkpoint or model.init/);
  });
  it("rejects unsupported combinations instead of ignoring them", () => {
    expect(() => validateConfig({ ...minimal, grpo: { groupSize: 1 } })).toThrow(/groupSize >= 2/);
    expect(() => validateConfig({ ...minimal, grpo: { estimator: "dr-grpo", aggregation: "sequence" } })).toThrow(/Dr. GRPO/);
    expect(() => validateConfig({ ...minimal, eval: { samples: 4, temperature: 0 } })).toThrow(/pass@k/);
    expect(() => validateConfig({ ...minimal, attention: { mode: "sink-window", sinks: 8, window: 4 } })).toThrow(/the window \(4\) must be larger than the number of sink slots \(8\)/);
    expect(() => validateConfig({ ...minimal, sft: { minLrRatio: 0.2 } })).toThrow(/sft\.minLrRatio: minLrRatio only applies to lrSchedule "cosine"/);
    expect(() => validateConfig({ ...minimal, grpo: { minLrRatio: 0.2 } })).toThrow(/grpo\.minLrRatio: minLrRatio only applies to lrSchedule "cosine"/);
    expect(() => validateConfig({ ...minimal, grpo: { lrSchedule: "step" } })).toThrow(/grpo\.lrSchedule: must be one of "constant", "cosine"/);
    expect(validateConfig({ ...minimal, grpo: { lrSchedule: "cosine", minLrRatio: 0.3 } }).grpo).toMatchObject({ lrSchedule: "cosine", minLrRatio: 0.3 });
    expect(validateConfig(minimal).grpo.lrSchedule).toBe("constant");
    expect(() => validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftContextLoss: false }] })).toThrow(/suites\.0\.sftContextLoss: false only applies with sft\.contextLossFraction above 0/);
    expect(validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftContextLoss: false }], sft: { contextLossFraction: 0.5 } }).suites[0]!.sftContextLoss).toBe(false);
    expect(() => validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftContextLoss: "no" }] })).toThrow(/suites\.0\.sftContextLoss/);
    expect(() => validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftLead: 0.5 }] })).toThrow(/suites\.0\.sftLead: needs sft\.batchBy "prefix"/);
    expect(() => validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftLead: 1.5 }], sft: { batchBy: "prefix" } })).toThrow(/suites\.0\.sftLead/);
    expect(validateConfig({ ...minimal, suites: [{ env: "sinkflex/arith-v0", sftLead: 0.5 }], sft: { batchBy: "prefix" } }).suites[0]!.sftLead).toBe(0.5);
    expect(() => validateConfig({ ...minimal, sft: { copyDrill: { examples: 100 } } })).toThrow(/sft\.copyDrill: needs sft\.batchBy "prefix"/);
    expect(() => validateConfig({ ...minimal, sft: { batchBy: "prefix", copyDrill: { examples: 100, spanTokens: [20, 8] } } })).toThrow(/sft\.copyDrill\.spanTokens: the shortest span/);
    expect(() => validateConfig({ ...minimal, sft: { batchBy: "prefix", copyDrill: { examples: 0 } } })).toThrow(/sft\.copyDrill\.examples/);
    expect(() => validateConfig({ ...minimal, sft: { batchBy: "prefix", copyDrill: { examples: 10, span: 8 } } })).toThrow(/sft\.copyDrill/);
    expect(validateConfig({ ...minimal, sft: { batchBy: "prefix", copyDrill: { examples: 100 } } }).sft.copyDrill).toEqual({ examples: 100, spanTokens: [8, 47], tokens: 200 });
    const drill = (copyDrill: object) => validateConfig({ ...minimal, sft: { batchBy: "prefix", copyDrill: { examples: 800, ...copyDrill } } }).sft.copyDrill;
    expect(drill({ untilLoss: 0.2 })).toMatchObject({ examples: 800, untilLoss: 0.2 });
    expect(drill({ untilLoss: 0.2, lossSteps: 50, maxExamples: 2000 })).toMatchObject({ untilLoss: 0.2, lossSteps: 50, maxExamples: 2000 });
    expect(() => drill({ maxExamples: 2000 })).toThrow(/sft\.copyDrill\.maxExamples: only applies with untilLoss/);
    expect(() => drill({ lossSteps: 50 })).toThrow(/sft\.copyDrill\.lossSteps: only applies with untilLoss/);
    expect(() => drill({ untilLoss: 0.2, maxExamples: 400 })).toThrow(/sft\.copyDrill\.maxExamples: must be at least `examples`/);
    expect(() => drill({ untilLoss: 0 })).toThrow(/sft\.copyDrill\.untilLoss/);
    expect(drill({ recall: 0.5 })).toMatchObject({ recall: 0.5 });
    expect(() => drill({ recall: 2 })).toThrow(/sft\.copyDrill\.recall/);
    // 800 examples in batches of 8 (the default) make 100 steps: a window of 101 does not fit.
    expect(() => drill({ untilLoss: 0.2, lossSteps: 101 })).toThrow(/sft\.copyDrill\.lossSteps: the drill's first 800 examples make 100 steps of batchSize 8, fewer than lossSteps \(101\)/);
    expect(() => validateConfig({ ...minimal, sft: { contextLossFraction: 1 } })).toThrow(/sft\.contextLossFraction: must be below 1/);
    expect(() => validateConfig({ ...minimal, sft: { lrSchedule: "linear" } })).toThrow(/sft\.lrSchedule: must be one of "constant", "cosine"/);
    expect(() => validateConfig({ ...minimal, suites: [{ env: "sinkflex/alfworld-gen-v0", sftMistakes: 0.8 }] })).toThrow(/sftMistakes: must be at most 0\.5/);
    expect(validateConfig({ ...minimal, sft: { lrSchedule: "cosine", minLrRatio: 0.2, warmupSteps: 5, contextLossFraction: 0.5 } }).sft).toMatchObject({ epochs: 2, lrSchedule: "cosine", minLrRatio: 0.2 });
  });
  it("checks suites[].remote: server URLs, session counts and unknown fields, naming the field", () => {
    const remote = (r: Record<string, unknown>) => ({ ...minimal, suites: [{ env: "sinkflex/arith-v0", remote: r }] });
    const url = "http://127.0.0.1:8765";
    expect(validateConfig(remote({ urls: [url] })).suites[0]!.remote).toEqual({ urls: [url], sessionsPerServer: 16, transport: "ws", stepTimeoutMs: 60_000, episodeTimeoutMs: 600_000, maxRetries: 3 });
    expect(() => validateConfig(remote({ urls: ["127.0.0.1:8765 "] }))).toThrow(/suites\.0\.remote\.urls\.0: a URL like http:\/\/127\.0\.0\.1:8765/);
    expect(() => validateConfig(remote({ urls: ["ftp://127.0.0.1:8765"] }))).toThrow(/suites\.0\.remote\.urls\.0: must be an http:\/\/ or https:\/\/ URL/);
    expect(() => validateConfig(remote({ urls: [url, url] }))).toThrow(/suites\.0\.remote\.urls: lists a server twice/);
    expect(() => validateConfig(remote({ urls: [] }))).toThrow(/suites\.0\.remote\.urls: list at least one server/);
    expect(() => validateConfig(remote({}))).toThrow(/suites\.0\.remote\.urls/);
    expect(() => validateConfig(remote({ urls: [url], sessionsPerServer: 0 }))).toThrow(/suites\.0\.remote\.sessionsPerServer: must be at least 1$/m);
    expect(() => validateConfig(remote({ urls: [url], sessionsPerServer: 2.5 }))).toThrow(/suites\.0\.remote\.sessionsPerServer: must be a whole number$/m);
    expect(() => validateConfig({ suites: minimal.suites })).toThrow(/^ {2}model: missing: this field is required \(expected object\)$/m);
    expect(() => validateConfig(remote({ urls: [url], sessions: 4 }))).toThrow(/suites\.0\.remote: unknown field\(s\) "sessions"/);
    expect(() => validateConfig(remote({ urls: [url], transport: "grpc" }))).toThrow(/suites\.0\.remote\.transport: must be one of "ws", "http"/);
    expect(() => validateConfig(remote({ urls: [url], maxRetries: -1 }))).toThrow(/suites\.0\.remote\.maxRetries/);
  });
  it("loads YAML and JSON files and reports parse errors with the file name", () => {
    const dir = mkdtempSync(join(tmpdir(), "cfg-"));
    writeFileSync(join(dir, "a.yaml"), "suites:\n  - env: sinkflex/arith-v0\nmodel:\n  init: {hiddenSize: 64}\ngrpo:\n  steps: 3\n");
    expect(loadConfigFile(join(dir, "a.yaml")).grpo.steps).toBe(3);
    writeFileSync(join(dir, "b.json"), "{ not json");
    expect(() => loadConfigFile(join(dir, "b.json"))).toThrow(ConfigError);
    expect(() => loadConfigFile(join(dir, "b.json"))).toThrow(/b\.json is not valid JSON/);
    expect(() => loadConfigFile(join(dir, "missing.yaml"))).toThrow(/cannot read/);
    rmSync(dir, { recursive: true, force: true });
  });
  it("applies a file's scale section for the run's minutes and matmul, and names what is wrong with it", () => {
    const dir = mkdtempSync(join(tmpdir(), "cfg-"));
    const recipe = (scale: string) => `suites:\n  - env: sinkflex/arith-v0\n    sftEpisodes: 100\n  - env: sinkflex/arith-v0\nmodel:\n  init: {}\nsft: { expertEpisodes: 30 }\n${scale}`;
    const file = join(dir, "r.yaml");
    writeFileSync(file, recipe("scale: { baseMinutes: 20, bf16Factor: 1.5, counts: [sft.expertEpisodes, suites.*.sftEpisodes] }\n"));
    const counts = (cfg: ReturnType<typeof validateConfig>) => [cfg.sft.expertEpisodes, cfg.suites[0]!.sftEpisodes, cfg.suites[1]!.sftEpisodes];
    // As written: the base minutes and the file's own matmul (fp32); the validated config has no scale.
    expect(counts(loadConfigFile(file))).toEqual([30, 100, undefined]);
    expect(loadConfigFile(file)).not.toHaveProperty("scale");
    expect(counts(loadConfigFile(file, { minutes: 50 }))).toEqual([75, 250, undefined]);
    expect(counts(loadConfigFile(file, { minutes: 10 }))).toEqual([30, 100, undefined]); // never below the base
    const bf16 = loadConfigFile(file, { matmul: "bf16", minutes: 40 });
    expect(counts(bf16)).toEqual([90, 300, undefined]);
    expect(bf16.model.matmul).toBe("bf16");
    // Without a scale section minutes change nothing; matmul is still set.
    writeFileSync(file, recipe(""));
    expect(counts(loadConfigFile(file, { minutes: 60, matmul: "bf16" }))).toEqual([30, 100, undefined]);
    const bad = (scale: string) => {
      writeFileSync(file, recipe(scale));
      return () => loadConfigFile(file);
    };
    expect(bad("scale: { baseMinutes: 20, counts: [grpo.steps] }\n")).toThrow(/scale\.counts\.0: must be one of "sft\.expertEpisodes", "suites\.\*\.sftEpisodes", "sft\.copyDrill\.examples"/);
    expect(bad("scale: { baseMinutes: 0, counts: [sft.expertEpisodes] }\n")).toThrow(/scale\.baseMinutes/);
    expect(bad("scale: { baseMinutes: 20, bf16Factor: 0.5, counts: [sft.expertEpisodes] }\n")).toThrow(/scale\.bf16Factor: must be at least 1/);
    expect(bad("scale: { baseMinutes: 20, counts: [sft.expertEpisodes], per: 2 }\n")).toThrow(/scale: unknown field\(s\) "per"/);
    expect(bad("scale: { baseMinutes: 20, counts: [sft.copyDrill.examples] }\n")).toThrow(/scale\.counts names sft\.copyDrill\.examples, which the file does not set/);
    // A config object (not a file) with a scale section says where scale belongs.
    expect(() => validateConfig({ ...minimal, scale: { baseMinutes: 20, counts: ["sft.expertEpisodes"] } })).toThrow(/scale: a config file's scale section is applied when the file is loaded/);
    expect(() => scaleRecipe({ ...minimal, scale: { baseMinutes: 20, counts: ["suites.*.sftEpisodes"] } }, "x")).toThrow(/x: scale\.counts names suites\.\*\.sftEpisodes, which the file does not set/);
    rmSync(dir, { recursive: true, force: true });
  });
});
