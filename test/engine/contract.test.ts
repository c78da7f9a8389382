// The engine contract (contract.ts) for the embedded engine on every kernel set.
import { createRandomModel } from "../../src/engine/embedded.js";
import { kernelSets } from "../model/fixtures.js";
import { engineContract } from "./contract.js";
import { tinyConfig } from "./helpers.js";

for (const k of await kernelSets()) {
  engineContract(`embedded engine, ${k.name} kernels`, async () => ({
    engine: createRandomModel(tinyConfig(), 21, { kernels: k, std: 0.15, blockSize: 4 }),
    vocabSize: 64,
  }));
}
