/**
 * `functionTool` with zod 3 schemas, as a project still on zod 3 writes them: zod 3 is installed into a
 * temporary folder with npm (from the npm cache when it is there) and loaded from it, and its schemas
 * are turned into tools. The JSON Schema is compared with what zod 4's toJSONSchema gives for the same
 * schema written in zod 4. Without zod 3 in the cache and no registry, the test is skipped with the
 * reason printed (SINKFLEX_PACKAGE_TEST=1 makes that a failure).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { z as z4 } from "zod";
import { functionTool } from "../../src/tools/index.js";

const dir = mkdtempSync(join(tmpdir(), "zod3-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** zod 3 from a fresh install, or the reason it could not be installed. */
function installZod3(): { z: any; version: string } | string {
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "zod3-user", private: true }));
  try {
    execFileSync("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "zod@3"], { cwd: dir, stdio: "pipe", timeout: 120_000 });
  } catch (err) {
    return `npm install zod@3 failed: ${String((err as { stderr?: Buffer }).stderr ?? err).slice(0, 300)}`;
  }
  const req = createRequire(join(dir, "package.json"));
  return { z: req("zod"), version: (req("zod/package.json") as { version: string }).version };
}

const zod3 = installZod3();
if (typeof zod3 === "string") {
  if (process.env.SINKFLEX_PACKAGE_TEST === "1") throw new Error(zod3);
  console.warn(`skipping the zod 3 tests: ${zod3}`);
}
const ctx = { state: undefined, signal: new AbortController().signal, finish() {} };

describe.skipIf(typeof zod3 === "string")("functionTool on zod 3 schemas", () => {
  const { z, version } = zod3 as { z: any; version: string };

  it("installed zod is 3.x and its schemas are zod 3 (no _zod)", () => {
    expect(version).toMatch(/^3\./);
    expect("_zod" in z.object({})).toBe(false);
  });

  it("a zod 3 object gives the JSON Schema that the same schema in zod 4 gives, and its arguments are checked", async () => {
    const make = (zz: any) =>
      zz.object({
        item: zz.string().min(1).describe("the item's name"),
        qty: zz.number().int().min(1).max(99),
        mode: zz.enum(["hold", "buy"]).optional(),
        tags: zz.array(zz.string()).default([]),
        note: zz.string().nullable(),
        kind: zz.literal("stock"),
        pair: zz.tuple([zz.string(), zz.number()]).optional(),
        extra: zz.record(zz.string(), zz.number()).optional(),
      });
    const seen: unknown[] = [];
    const tool = functionTool({ name: "reserve", description: "reserve stock", parameters: make(z), execute: (args: unknown) => (seen.push(args), "ok") });
    const same = functionTool({ name: "reserve", description: "reserve stock", parameters: make(z4), execute: () => "ok" });
    expect(tool.parameters).toEqual(same.parameters);
    expect(await tool.execute({ item: "widget", qty: 3, note: null, kind: "stock" }, ctx)).toBe("ok");
    expect(seen).toEqual([{ item: "widget", qty: 3, note: null, kind: "stock", tags: [] }]);
    expect(() => tool.execute({ item: "", qty: 0, note: null, kind: "stock" }, ctx)).toThrow(/invalid arguments: item: .*; qty: /);
  });

  it("a zod 3 type with no JSON Schema here is refused with the type, the version and the fix", () => {
    expect(() => functionTool({ name: "when", description: "d", parameters: z.object({ at: z.date() }), execute: () => "ok" })).toThrow(
      /functionTool "when": the zod 3 type ZodDate .*npm install zod@4/,
    );
  });

  it("a zod 3 schema that is not an object is refused", () => {
    expect(() => functionTool({ name: "s", description: "d", parameters: z.string(), execute: () => "ok" })).toThrow(/must be a zod object schema .*zod 3 ZodString/);
  });
});
