/**
 * The bundled recipes' suites can be served remotely as written: a `sinkflex envs serve` server accepts
 * the session options that configs/demo.yaml (and demo-quick.yaml) gives each suite (its task counts included), and a
 * session opens and resets. Not the pool's scheduling (pool.test.ts) or the option rules themselves
 * (hostile.test.ts).
 */
import { afterEach, describe, expect, it } from "vitest";
import { RemoteEnv } from "../../../src/gym/remote/client.js";
import { serveEnv, type EnvServer } from "../../../src/gym/remote/server.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { loadConfigFile } from "../../../src/pipeline/config.js";

const servers: EnvServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe("the demo recipe's suites on an env server", () => {
  it.each(["configs/demo.yaml", "configs/demo-quick.yaml"])("accepts every suite's options as %s writes them, and opens and resets a session of each", async (file) => {
    registerBundledEnvs();
    const cfg = loadConfigFile(file);
    for (const suite of cfg.suites) {
      const server = await serveEnv(suite.env);
      servers.push(server);
      const env = await RemoteEnv.connect(server.url, { envId: suite.env, options: suite.options, transport: "ws" });
      try {
        // The last task of the suite's count (the task sets are that long on the server too).
        const last = typeof suite.options.count === "number" ? suite.options.count - 1 : 0;
        const [obs] = await env.reset({ seed: 1, options: { taskIndex: last } });
        expect(obs, suite.env).toBeTruthy();
      } finally {
        await env.close();
      }
    }
  }, 120_000);
});
