/**
 * The core is sinkflex's ground floor: its files import only each other (and no package), so every module
 * may import it without an import circle. Reads the source files; runs nothing else.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const CORE = join(import.meta.dirname, "../../src/core");

describe("core layering", () => {
  it("src/core imports nothing outside src/core", () => {
    const files = readdirSync(CORE).filter((f) => f.endsWith(".ts"));
    expect(files).toContain("index.ts");
    for (const f of files) {
      const text = readFileSync(join(CORE, f), "utf8");
      for (const m of text.matchAll(/(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/g)) {
        expect(m[1], `${f} imports ${m[1]}`).toMatch(/^\.\/[\w-]+\.js$/);
      }
    }
  });
});
