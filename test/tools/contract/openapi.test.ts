/**
 * The tool-source contract for OpenAPI tools (`openApiTools`): the pet store of test/tools/fixtures, a
 * real HTTP server on 127.0.0.1, one fresh server per source. The server keeps its state across
 * episodes (an OpenAPI source has no per-episode isolation) and checks arguments only as far as it
 * cares to, so ToolEnv's schema check is what stands in front of it.
 */
import { openApiTools, type OpenApiDocument } from "../../../src/tools/openapi.js";
import { startPetstore } from "../fixtures/petstore.js";
import { toolSourceContract } from "./tool-source.contract.js";

toolSourceContract("OpenAPI tools of a pet store on 127.0.0.1", { deterministic: true, isolatesEpisodes: false, checksArgumentsItself: false }, async () => {
  const store = await startPetstore();
  // The slow operation is left out: it only waits.
  const document = (await (await fetch(`${store.url}/openapi.json`)).json()) as OpenApiDocument;
  const tools = openApiTools(document, { include: (op) => op.name !== "slow", requestTimeoutMs: 5_000 });
  let stopped = false;
  return {
    tools,
    script: [
      { tool: "listPets", args: { status: "sold" }, expect: /^\[\{"id":2,"name":"Tom","status":"sold","tag":"cat"\}\]$/ },
      { tool: "addPet", args: { name: "Nemo", status: "available", tag: "fish" }, expect: /"id":4/ },
      { tool: "getPet", args: { petId: 4 }, expect: /"name":"Nemo"/ },
      { tool: "hello", args: {}, expect: /^hello, agent$/ },
    ],
    invalid: { tool: "listPets", args: { status: "lost" } },
    failing: { tool: "getPet", args: { petId: 99 }, expect: /GET \/pets\/99 answered HTTP 404 Not Found: \{"error":"no pet with id 99"\}/ },
    stopService: async () => {
      stopped = true;
      await store.close();
    },
    stoppedError: /cannot reach the service at http:\/\/127\.0\.0\.1:\d+ \((ECONNREFUSED|ECONNRESET|UND_ERR_SOCKET)\); [A-Z]+ \/.* was not answered/,
    dispose: async () => {
      if (!stopped) await store.close();
    },
  };
});
