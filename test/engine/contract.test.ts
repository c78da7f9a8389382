// The engine contract (contract.ts) for the embedded engine on every kernel set, with full attention and
// with the sink-window mask (whose sessions evict KV blocks: kvRewind lets the contract's truncates rewind).
import { createRandomModel } from "../../src/engine/embedded.js";
import { kernelSets } from "../model/fixtures.js";
import { engineContract } from "./contract.js";
import { tinyConfig } from "./helpers.js";

for (const k of await kernelSets()) {
  engineContract(`embedded engine, ${k.name} kernels`, async () => ({
    engine: createRandomModel(tinyConfig(), 21, { kernels: k, std: 0.15, blockSize: 4 }),
    vocabSize: 64,
  }));
  engineContract(`embedded engine, ${k.name} kernels, sink-window mask with KV eviction`, async () => ({
    engine: createRandomModel(tinyConfig(), 21, {
      kernels: k, std: 0.15, blockSize: 2, attention: { window: 6, sinks: 2 }, kvRewind: 8,
    }),
    vocabSize: 64,
  }));
}
