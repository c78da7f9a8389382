/**
 * The OpenAPI tool source against a real HTTP server on 127.0.0.1 that serves its own document.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openApiTools } from "../../src/tools/openapi.js";
import type { Tool } from "../../src/tools/tool.js";
import { ToolEnv, arrayTasks } from "../../src/tools/tool-env.js";
import { validateArguments } from "../../src/tools/validate.js";
import { startPetstore, type Petstore } from "./fixtures/petstore.js";

let store: Petstore;
const dir = mkdtempSync(join(tmpdir(), "sinkflex-openapi-test-"));
beforeAll(async () => {
  store = await startPetstore();
});
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const ctx = () => ({ state: undefined, signal: new AbortController().signal, finish: () => undefined });
const byName = (tools: Tool[]) => new Map(tools.map((t) => [t.name, t]));

describe.each(["3.0", "3.1"] as const)("OpenAPI %s", (version) => {
  it("builds one tool per operation, with enums, required flags and refs resolved", () => {
    const tools = byName(openApiTools(store.document(version), { baseUrl: store.url }));
    expect([...tools.keys()]).toEqual(["listPets", "addPet", "getPet", "delete_pets_petId", "put_pets_petId_rename", "slow", "broken", "liar", "hello"]);
    const list = tools.get("listPets")!.parameters as any;
    // The enum-typed query parameter is kept, with its values.
    expect(list.properties.status).toEqual({ type: "string", enum: ["available", "pending", "sold"], description: "Which pets to list" });
    expect(list.required).toEqual(["status"]);
    expect(list.properties.limit).toEqual({ type: "integer", minimum: 1, maximum: 100, default: 20 });
    const add = tools.get("addPet")!.parameters as any;
    expect(add.required).toEqual(["name", "status"]);
    expect(add.properties.status.enum).toEqual(["available", "pending", "sold"]);
    expect(add.properties.tag.type).toEqual(["string", "null"]);
    expect(tools.get("getPet")!.parameters).toMatchObject({ required: ["petId"], properties: { petId: { type: "integer", description: "The pet's id" } } });
    expect((tools.get("delete_pets_petId")!.parameters as any).required).toEqual(["petId", "X-Api-Key"]);
    expect((tools.get("put_pets_petId_rename")!.parameters as any).required).toEqual(["petId", "body"]);
    // The schemas are valid JSON Schema: the validator accepts good arguments and rejects bad ones.
    expect(validateArguments(list, { status: "sold" })).toEqual({ ok: true });
    expect(validateArguments(list, { status: "lost" })).toMatchObject({ ok: false, message: expect.stringContaining('must be one of ["available","pending","sold"]') });
    expect(validateArguments(add, { name: "A", status: "sold", tag: null })).toEqual({ ok: true });
    expect(validateArguments(add, { name: "A" })).toMatchObject({ ok: false });
  });

  it("calls the real server with path, query, header and body parameters", async () => {
    const tools = byName(openApiTools(store.document(version), { baseUrl: store.url, headers: { authorization: "Bearer t0ken" } }));
    store.resetData();
    store.requests.length = 0;
    expect(JSON.parse((await tools.get("listPets")!.execute({ status: "sold", limit: 5 }, ctx())) as string)).toEqual([{ id: 2, name: "Tom", status: "sold", tag: "cat" }]);
    expect(store.requests.at(-1)).toMatchObject({ method: "GET", url: "/pets?status=sold&limit=5", headers: { authorization: "Bearer t0ken" } });
    const created = JSON.parse((await tools.get("addPet")!.execute({ name: "Nemo", status: "available", tag: "fish" }, ctx())) as string);
    expect(created).toEqual({ id: 4, name: "Nemo", status: "available", tag: "fish" });
    expect(JSON.parse(store.requests.at(-1)!.body)).toEqual({ name: "Nemo", status: "available", tag: "fish" });
    expect(store.requests.at(-1)!.headers["content-type"]).toBe("application/json");
    await tools.get("put_pets_petId_rename")!.execute({ petId: 4, body: "Dory" }, ctx());
    expect(JSON.parse((await tools.get("getPet")!.execute({ petId: 4 }, ctx())) as string).name).toBe("Dory");
    expect(await tools.get("delete_pets_petId")!.execute({ petId: 4, "X-Api-Key": "secret" }, ctx())).toBe("HTTP 204 (empty body)");
    expect(store.requests.at(-1)).toMatchObject({ method: "DELETE", url: "/pets/4", headers: { "x-api-key": "secret" } });
    expect(await tools.get("hello")!.execute({}, ctx())).toBe("hello, agent");
  });

  it("turns HTTP errors and bodies that are not JSON into readable errors", async () => {
    const tools = byName(openApiTools(store.document(version), { baseUrl: store.url }));
    await expect(tools.get("getPet")!.execute({ petId: 99 }, ctx())).rejects.toThrow('GET /pets/99 answered HTTP 404 Not Found: {"error":"no pet with id 99"}');
    await expect(tools.get("delete_pets_petId")!.execute({ petId: 1, "X-Api-Key": "wrong" }, ctx())).rejects.toThrow(/HTTP 401 Unauthorized: \{"error":"bad api key"\}/);
    await expect(tools.get("broken")!.execute({}, ctx())).rejects.toThrow(/GET \/broken answered HTTP 500 Internal Server Error: <html><body><h1>Internal Server Error<\/h1><p>database exploded/);
    await expect(tools.get("liar")!.execute({}, ctx())).rejects.toThrow(/GET \/liar answered HTTP 200 with a body that is not valid JSON.*<html>not json<\/html>/);
  });
});

describe("OpenAPI requests that fail", () => {
  it("times out a request, and stops at once when the episode's signal aborts", async () => {
    const tools = byName(openApiTools(store.document("3.1"), { baseUrl: store.url, requestTimeoutMs: 300 }));
    const t0 = Date.now();
    await expect(tools.get("slow")!.execute({}, ctx())).rejects.toThrow("GET /slow got no answer within 300 ms");
    expect(Date.now() - t0).toBeLessThan(2_500);
    const controller = new AbortController();
    const running = byName(openApiTools(store.document("3.1"), { baseUrl: store.url })).get("slow")!.execute({}, { ...ctx(), signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    await expect(running).rejects.toThrow("GET /slow was cancelled");
  });

  it("says the service is down when nothing listens", async () => {
    const down = await startPetstore();
    const url = down.url;
    await down.close();
    const tools = byName(openApiTools(down.document("3.0"), { baseUrl: url }));
    await expect(tools.get("listPets")!.execute({ status: "sold" }, ctx())).rejects.toThrow(`cannot reach the service at ${url} (ECONNREFUSED); GET /pets?status=sold was not answered`);
  });

  it("loads the document from YAML and JSON files, fetched from the server itself", async () => {
    const served = await (await fetch(`${store.url}/openapi.json`)).json();
    const jsonFile = join(dir, "petstore.json");
    const yamlFile = join(dir, "petstore.yaml");
    writeFileSync(jsonFile, JSON.stringify(served));
    writeFileSync(yamlFile, toYaml(served));
    for (const file of [jsonFile, yamlFile]) {
      // No baseUrl: the document's servers[0].url is used.
      const tools = byName(openApiTools(file));
      expect(tools.size).toBe(9);
      expect(JSON.parse((await tools.get("listPets")!.execute({ status: "pending" }, ctx())) as string)).toEqual([{ id: 3, name: "Kiwi", status: "pending", tag: null }]);
    }
  });

  it("resolves recursive schemas and keeps formats, with operation parameters overriding path ones", () => {
    const doc = {
      openapi: "3.1.0",
      paths: {
        "/trees/{id}": {
          parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }],
          post: {
            operationId: "plantTree",
            parameters: [
              { name: "id", in: "path", required: true, schema: { type: "integer" } },
              { name: "on", in: "query", schema: { type: "string", format: "date" } },
            ],
            requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/Node" } } } },
          },
        },
      },
      components: {
        schemas: { Node: { type: "object", required: ["value"], properties: { value: { type: "string" }, children: { type: "array", items: { $ref: "#/components/schemas/Node" } } } } },
      },
    };
    const [tool] = openApiTools(doc, { baseUrl: "http://127.0.0.1:1" });
    const p = tool!.parameters as any;
    expect(p.properties.id).toEqual({ type: "integer" });
    expect(p.required).toEqual(["id", "value"]);
    expect(p.properties.children.items).toEqual({ type: "object", description: "(recursive: same shape as Node)" });
    expect(validateArguments(p, { id: 1, value: "root", children: [{ value: "leaf", children: [{ value: "x", children: [] }] }] })).toEqual({ ok: true });
    expect(validateArguments(p, { id: 1, value: "root", on: "yesterday" })).toMatchObject({ ok: false, message: 'argument on: must match format "date"' });
  });

  it("rejects Swagger 2.0, remote refs and a missing base URL with what to do", () => {
    expect(() => openApiTools({ swagger: "2.0", paths: {} }, { baseUrl: "http://x" })).toThrow(/only OpenAPI 3.0 and 3.1.*found Swagger 2.0/);
    expect(() => openApiTools({ openapi: "3.1.0", paths: {} })).toThrow(/no base URL: pass `baseUrl`/);
    const remote = { openapi: "3.1.0", paths: { "/a": { get: { parameters: [{ $ref: "other.yaml#/p" }] } } } };
    expect(() => openApiTools(remote, { baseUrl: "http://x" })).toThrow(/only local \$refs/);
  });

  it("serves the tools in a ToolEnv, where a schema failure and an HTTP error are observations", async () => {
    const env = new ToolEnv({
      name: "PetEnv",
      tasks: arrayTasks(["find a sold pet"]),
      tools: openApiTools(store.document("3.0"), { baseUrl: store.url }),
      open: async (task) => ({ state: null, messages: [{ role: "user" as const, content: task }] }),
      score: async () => ({ reward: 0, evidence: {} }),
    });
    await env.reset({ seed: 0 });
    const [obs, , , , info] = await env.step({
      content: "",
      toolCalls: [
        { id: "a", name: "listPets", arguments: '{"status": "lost"}' },
        { id: "b", name: "getPet", arguments: '{"petId": 42}' },
        { id: "c", name: "listPets", arguments: '{"status": "sold"}' },
      ],
    });
    expect(obs.messages.map((m) => m.content)).toEqual([
      'Error: invalid arguments for "listPets": argument status: must be one of ["available","pending","sold"]. Expected: listPets({status: "available" | "pending" | "sold", limit?: integer}).',
      expect.stringMatching(/^Error: "getPet" failed: GET \/pets\/42 answered HTTP 404/),
      '[{"id":2,"name":"Tom","status":"sold","tag":"cat"}]',
    ]);
    expect((info.toolErrors as { kind: string }[]).map((e) => e.kind)).toEqual(["invalid_arguments", "tool_error"]);
    await env.close();
  });
});
