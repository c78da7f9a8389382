/**
 * The docs' code imports what a user's project can import: every `import { ... } from "sinkflex"` in
 * docs/*.md and README.md names a value the package exports, and no doc imports sinkflex's sources by
 * path (./src/..., sinkflex/src/...), which exist only in a checkout.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import * as sinkflex from "../../src/index.js";

const ROOT = resolve(import.meta.dirname, "../..");
const docs = [...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => join("docs", f)), "README.md"];
const text = (f: string) => readFileSync(join(ROOT, f), "utf8");

describe("imports in the docs", () => {
  it("name only what the package exports", () => {
    const missing: string[] = [];
    let seen = 0;
    for (const f of docs) {
      for (const m of text(f).matchAll(/import\s+(type\s+)?\{([^}]*)\}\s+from\s+"sinkflex"/g)) {
        if (m[1]) continue; // types have no runtime trace
        for (const raw of m[2]!.split(",")) {
          const name = raw.trim().replace(/\s+as\s+\w+$/, "");
          if (name === "" || name === "..." || name.startsWith("type ")) continue;
          seen++;
          if (!(name in sinkflex)) missing.push(`${f}: ${name}`);
        }
      }
    }
    expect(seen).toBeGreaterThan(20);
    expect(missing).toEqual([]);
  });

  it("never import sinkflex's sources by path", () => {
    const bad = docs.flatMap((f) => [...text(f).matchAll(/from\s+"((?:\.\.?\/)+src\/[^"]*|sinkflex\/src\/[^"]*)"/g)].map((m) => `${f}: ${m[1]}`));
    expect(bad).toEqual([]);
  });
});
