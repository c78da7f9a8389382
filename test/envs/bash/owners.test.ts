/**
 * Owners in the bash suite: the reference command and the agent's command run in two sandboxes with
 * different host uids, yet a command that prints owners (`ls -l`, `tar tvf` of an archive it made,
 * `stat`) must print the same in both, so the reference command submitted as the answer scores 1.
 * Checked under each sandbox backend available here (one that is not is reported as skipped).
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import { make, registeredIds } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import { NL2BASH_ENV_ID, registerBash } from "../../../src/envs/bash/index.js";
import { probeIsolation, type IsolationKind } from "../../../src/sandbox/index.js";

registerBundledEnvs();
if (!registeredIds().includes(NL2BASH_ENV_ID)) registerBash();

const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-bash-owners-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the trees created inside
process.env.TMPDIR = scratch;
const taskFile = join(mkdtempSync(join(tmpdir(), "sinkflex-test-owner-tasks-")), "owners.json");
writeFileSync(
  taskFile,
  JSON.stringify([
    { query: "List dir1 in long format.", gold: "ls -l dir1" },
    { query: "Archive dir1 into /tmp/d.tar and list the archive verbosely.", gold: "tar cf /tmp/d.tar dir1 && tar tvf /tmp/d.tar" },
    { query: "Make a new file and show its owner.", gold: "touch made.txt && stat -c '%U:%G %u:%g' made.txt && find . -maxdepth 1 -name made.txt -printf '%u %g\\n'" },
  ]),
);
afterAll(() => {
  rmSync(join(taskFile, ".."), { recursive: true, force: true });
  const left = readdirSync(scratch);
  rmSync(scratch, { recursive: true, force: true });
  expect(left, "every episode's tree and sandbox folder must be removed").toEqual([]);
});

describe("bash suite: owners", () => {
  for (const kind of ["bwrap", "unshare"] as IsolationKind[]) {
    const unavailable = probeIsolation(kind);
    if (unavailable) {
      it.skip(`${kind}: not available on this machine (${unavailable})`, () => {});
      continue;
    }
    it(`${kind}: the reference command that prints owners (ls -l, tar tvf, stat) scores 1 as the answer`, async () => {
      const env = await make<ChatObservation, AgentTurn>(NL2BASH_ENV_ID, { tasks: taskFile, tree: "testbed", isolation: kind });
      try {
        for (let taskIndex = 0; taskIndex < 3; taskIndex++) {
          const episode = await runExpertEpisode(env, NL2BASH_ENV_ID, { taskIndex });
          const evidence = episode.info.evidence as { output: string; expectedOutput: string };
          expect(evidence.output, `task ${taskIndex}`).toBe(evidence.expectedOutput);
          expect(evidence.output).toMatch(/root/);
          expect(episode.reward, `task ${taskIndex}: ${JSON.stringify(evidence)}`).toBe(1);
        }
      } finally {
        await env.close();
      }
    }, 120_000);
  }
});
