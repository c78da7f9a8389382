// The policy-sampler contract (policy-sampler.contract.ts) for the embedded engine, loaded from the checkpoint folder.
import { loadEngine } from "../../../src/engine/embedded.js";
import { policySamplerContract } from "./policy-sampler.contract.js";

policySamplerContract("embedded engine", async (checkpoint) => {
  const engine = loadEngine(checkpoint);
  return { sampler: engine, close: async () => engine.dispose() };
});
