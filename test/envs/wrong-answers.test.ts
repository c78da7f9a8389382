/**
 * Every bundled suite's verifier rejects wrong answers: `envs replay <id> --wrong` plays the first few
 * tasks of each env to a plausible wrong answer (a changed literal, value, argument or command; one
 * step short of the goal; a fix left out) and every one must score 0. Tasks without a well-defined
 * wrong answer (MINT code tasks, tau tasks that write nothing) are reported as skipped, never played.
 * A tau wrong answer must change the final database: a changed argument of a gold write the tools
 * refuse anyway (too little gift card balance) leaves it as the gold actions do, and is no wrong answer.
 */
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { wrongReplayCommand } from "../../src/cli/commands/envs-replay.js";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { replayWrong } from "../../src/envs/suite.js";
import { taskFile } from "../../src/envs/tau/tasks.js";
import { wrongSqls } from "../../src/envs/sql/expert.js";

registerBundledEnvs();
const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-wrong-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the trees created inside
process.env.TMPDIR = scratch;
afterAll(() => {
  const left = readdirSync(scratch).filter((name) => name !== "sinkflex-crm"); // the crm suite's shared database cache
  rmSync(scratch, { recursive: true, force: true });
  expect(left).toEqual([]);
});

// Tasks per env: enough to cover each kind of answer, bounded for a busy 2-core machine.
const ENVS: [string, number][] = [
  ["sinkflex/arith-v0", 6],
  ["sinkflex/spider-sql-v0", 6],
  ["sinkflex/restapi-v0", 8],
  ["sinkflex/alfworld-v0", 4],
  ["sinkflex/alfworld-gen-v0", 4],
  ["sinkflex/nl2bash-v0", 3],
  ["sinkflex/nl2bash-gen-v0", 3],
  ["sinkflex/tau-retail-v0", 28], // through tasks 24 and 27, whose first gold write is refused
  ["sinkflex/tau-airline-v0", 6],
  ["sinkflex/crm-v0", 6],
  ["sinkflex/mint-v0", 4],
  ["sinkflex/swe-v0", 2],
];

describe("envs replay --wrong", () => {
  for (const [id, limit] of ENVS) {
    it(`${id}: no wrong answer scores above 0 (first ${limit} tasks)`, async () => {
      const r = await wrongReplayCommand(id, { limit: String(limit) });
      expect(r.text).toMatch(new RegExp(`^${id}: 0 of [1-9]\\d* wrong answers scored above 0`));
      expect(r.exitCode, r.text).toBe(0);
    }, 120_000);
  }

  it("tau changes a write the tools carry out, not one they refuse: the retail tasks whose gold actions include a refused write", async () => {
    // Each of these tasks has a gold write that fails with "insufficient gift card balance" (and
    // changes nothing); changing an argument of that write left the database as the gold actions do.
    const refused = [24, 27, 161, 214, 229, 252, 253, 288, 349, 369, 427, 441, 469];
    const all = JSON.parse(readFileSync(taskFile("retail", "train"), "utf8")) as unknown[];
    const tasksFile = join(scratch, "refused-writes.json");
    writeFileSync(tasksFile, JSON.stringify(refused.map((i) => all[i])));
    try {
      const report = await replayWrong("sinkflex/tau-retail-v0", { tasksFile });
      expect(report.scoredAboveZero).toEqual([]);
      // Task 288 (index 7 here): the customer's only payment method is the gift card and no single
      // changed argument makes the exchange go through, so it has no wrong answer.
      expect(report.skipped.map((s) => s.task)).toEqual([7]);
      expect(report.total).toBe(refused.length - 1);
    } finally {
      rmSync(tasksFile);
    }
  }, 120_000);

  it("sql tries the next wrong query when a changed literal selects the same rows; --wrong refuses --gold", async () => {
    // A sql wrong answer is only a changed literal when that changes the result; else the next one.
    expect(wrongSqls("SELECT name FROM city WHERE Population BETWEEN 160000 AND 900000")).toEqual([
      "SELECT name FROM city WHERE Population BETWEEN 160001 AND 900000",
      "SELECT COUNT(*) + 1 AS n FROM (SELECT name FROM city WHERE Population BETWEEN 160000 AND 900000) AS wrong_answer",
    ]);
    await expect(wrongReplayCommand("sinkflex/arith-v0", { gold: true })).rejects.toThrow(/exclude each other/);
  });
});
