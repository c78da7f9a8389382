/**
 * docs/cli.md's command reference is the command tree's own: every command and option, with its help
 * text and default, as `commandReference` reads them off the program. A flag added without refreshing
 * the page fails here (refresh with `npx tsx scripts/cli-reference.ts --write`).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { buildProgram, commandReference, REFERENCE_BEGIN, REFERENCE_END, withReference } from "../../src/cli/index.js";

describe("the command reference", () => {
  it("docs/cli.md holds the current reference of every command and option", () => {
    const doc = readFileSync(new URL("../../docs/cli.md", import.meta.url), "utf8");
    expect(doc).toContain(REFERENCE_BEGIN);
    expect(withReference(doc, commandReference(buildProgram()))).toBe(doc);
  });

  it("lists every runnable command with each of its options", () => {
    const program = buildProgram();
    const reference = commandReference(program);
    const walk = (cmd: typeof program, path: string[]): void => {
      for (const sub of cmd.commands) {
        if (sub.name() === "help") continue;
        const p = [...path, sub.name()];
        if (sub.commands.length === 0) {
          expect(reference).toContain(`### \`${p.join(" ")}`);
          for (const o of sub.options) if (o.long !== "--help") expect(reference).toContain(`\`${o.flags}\``);
        }
        walk(sub, p);
      }
    };
    walk(program, ["sinkflex"]);
    expect(withReference("intro\n", "x\n")).toBe(`intro\n\n${REFERENCE_BEGIN}\n\nx\n\n${REFERENCE_END}\n`);
  });
});
