/**
 * The household env through the registry: the opening text, `act` with admissible and inadmissible
 * commands, `info.admissibleCommands`, the end of an episode when the goal holds, the scripted expert
 * (on every solvable benchmark game), and seeded determinism.
 */
import { describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import type { Env } from "../../../src/gym/env.js";
import { make } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode, suiteForEnv } from "../../../src/envs/suite.js";
import { ALFWORLD_ENV_ID } from "../../../src/envs/household/index.js";
import { plan } from "../../../src/envs/household/expert.js";
import { defaultGamesDir, listGames, loadGame } from "../../../src/envs/household/tasks.js";

registerBundledEnvs();

const act = (command: string, id = "c1"): AgentTurn => ({ content: "", toolCalls: [{ id, name: "act", arguments: JSON.stringify({ command }) }] });
const text = (obs: ChatObservation) => obs.messages.map((m) => m.content).join("\n");
const bowlTask = listGames(defaultGamesDir(), { solvableOnly: true }).findIndex((t) => t.id === "pick_clean_then_place_in_recep-Bowl-None-Cabinet-10/trial_T20190909_061130_844814");

describe("sinkflex/alfworld-v0", () => {
  it("opens with ALFWorld's welcome, the room and the task, and lists admissible commands", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make(ALFWORLD_ENV_ID);
    try {
      const [obs, info] = await env.reset({ seed: 1, options: { taskIndex: bowlTask } });
      expect(obs.tools?.map((t) => t.name)).toEqual(["act"]);
      const opening = obs.messages[1]!.content;
      expect(opening).toMatch(/^-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room\. Looking quickly around you, you see a cabinet 6, /);
      expect(opening).toMatch(/Your task is to: clean some bowl and put it in cabinet\.$/);
      expect(info.admissibleCommands).toContain("go to countertop 3");
      expect(info.admissibleCommands).not.toContain("take bowl 1 from countertop 3");

      let [o, reward, terminated, , i] = await env.step(act("take bowl 1 from countertop 3"));
      expect(text(o)).toBe("Nothing happens.");
      expect([reward, terminated]).toEqual([0, false]);
      [o, , , , i] = await env.step(act("go to countertop 3"));
      expect(text(o)).toMatch(/^You arrive at loc \d+\. On the countertop 3, you see a bowl 1, /);
      expect(i.admissibleCommands).toContain("take bowl 1 from countertop 3");
      for (const c of ["take bowl 1 from countertop 3", "go to sinkbasin 1", "clean bowl 1 with sinkbasin 1", "go to cabinet 1"]) {
        [o, reward, terminated] = await env.step(act(c));
        expect(terminated, c).toBe(false);
      }
      [o, reward, terminated, , i] = await env.step(act("put bowl 1 in/on cabinet 1"));
      expect(text(o)).toBe("You put the bowl 1 in/on the cabinet 1.");
      expect([reward, terminated]).toEqual([1, true]);
      expect(i.evidence).toMatchObject({ goalHolds: true, invalidCommands: 1, steps: 7 });
    } finally {
      await env.close();
    }
  });

  it("scores 0 when the agent stops before the goal, and a bad call is a readable error", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make(ALFWORLD_ENV_ID);
    try {
      await env.reset({ seed: 3, options: { taskIndex: bowlTask } });
      const [o, , terminated, , info] = await env.step({ content: "", toolCalls: [{ id: "x", name: "act", arguments: "{\"cmd\": 1}" }] });
      expect(terminated).toBe(false);
      expect(text(o)).toMatch(/^Error: invalid arguments for "act"/);
      expect(info.toolErrors).toHaveLength(1);
      const [, reward, ended, , last] = await env.step({ content: "I give up.", toolCalls: [] });
      expect([reward, ended]).toEqual([0, true]);
      expect(last.evidence).toMatchObject({ goalHolds: false });
    } finally {
      await env.close();
    }
  });

  it("the scripted expert solves the games marked solvable (a sample; all with `envs replay`)", async () => {
    const report = await suiteForEnv(ALFWORLD_ENV_ID).replay!(ALFWORLD_ENV_ID, { gold: false, limit: 25 });
    expect(report.failures).toEqual([]);
    expect(report.total).toBe(25);
    const env = await make(ALFWORLD_ENV_ID);
    expect(env.metadata.taskCount).toBe(101);
    expect((await make(ALFWORLD_ENV_ID, { includeUnsolvable: true })).metadata.taskCount).toBe(162);
    await env.close();
    expect(report.succeeded).toBe(report.total);
  }, 60_000);

  it("the expert searches like a player by default, and can go straight to the objects", () => {
    const game = loadGame(listGames(defaultGamesDir(), { solvableOnly: true })[bowlTask]!);
    const searching = plan(game);
    const direct = plan(game, { explore: false });
    expect(direct).toEqual(["go to countertop 3", "take bowl 1 from countertop 3", "go to sinkbasin 1", "clean bowl 1 with sinkbasin 1", "go to cabinet 1", "put bowl 1 in/on cabinet 1"]);
    expect(searching.length).toBeGreaterThan(direct.length);
    expect(searching.filter((c) => c.startsWith("open ")).length).toBe(searching.filter((c) => c.startsWith("close ")).length);
  });

  it("the expert's mistakes change nothing, are never trained on, and are followed by its recovery", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make("sinkflex/alfworld-gen-v0", { source: "generated", difficulty: 1, count: 60 });
    try {
      const play = (taskIndex: number) => runExpertEpisode(env, "sinkflex/alfworld-gen-v0", { taskIndex, seed: taskIndex, mistakes: 0.2 });
      let mistakes = 0;
      const verbs = new Set<string>();
      for (let i = 0; i < 60; i++) {
        const [clean, noisy] = [await runExpertEpisode(env, "sinkflex/alfworld-gen-v0", { taskIndex: i, seed: i }), await play(i)];
        expect(noisy.reward).toBe(1);
        const kept = noisy.messages.filter((m, k) => !(m.role === "assistant" && m.weight === 0) && !(k > 0 && noisy.messages[k - 1]!.role === "assistant" && (noisy.messages[k - 1] as { weight?: number }).weight === 0));
        // Without its mistakes and their answers, the episode is the clean one (tool-call ids aside).
        const commands = (ms: typeof kept) => ms.map((m) => (m.role === "assistant" ? m.toolCalls?.[0]?.arguments : m.content));
        expect(commands(kept)).toEqual(commands(clean.messages));
        noisy.messages.forEach((m, k) => {
          if (m.role !== "assistant" || m.weight !== 0) return;
          mistakes++;
          verbs.add(JSON.parse(m.toolCalls![0]!.arguments).command.split(" ")[0]);
          expect(noisy.messages[k + 1]!.content).toBe("Nothing happens.");
          expect(noisy.messages[k + 2]).toMatchObject({ role: "assistant" });
          expect((noisy.messages[k + 2] as { weight?: number }).weight).toBeUndefined();
        });
      }
      expect(mistakes).toBeGreaterThan(30);
      expect([...verbs].sort()).toEqual(["go", "take"]);
      expect(JSON.stringify((await play(7)).messages)).toBe(JSON.stringify((await play(7)).messages));
      await expect(runExpertEpisode(env, "sinkflex/alfworld-gen-v0", { taskIndex: 0, mistakes: 1 })).rejects.toThrow(/mistakes must be a chance in \[0, 1\)/);
    } finally {
      await env.close();
    }
    const arith: Env<ChatObservation, AgentTurn> = await make("sinkflex/arith-v0", { difficulty: 1 });
    await expect(runExpertEpisode(arith, "sinkflex/arith-v0", { taskIndex: 0, mistakes: 0.1 })).rejects.toThrow(/the expert of sinkflex\/arith-v0 makes no mistakes to recover from \(household's does\); set mistakes \(a training suite's sftMistakes\) to 0/);
    await arith.close();
  });

  it("the same seed and the same actions give the same trajectory", async () => {
    const play = async () => {
      const env: Env<ChatObservation, AgentTurn> = await make(ALFWORLD_ENV_ID);
      try {
        const [first, info] = await env.reset({ seed: 42 });
        const episode = await runExpertEpisode(env, ALFWORLD_ENV_ID, { taskIndex: info.taskIndex as number, seed: 42 });
        return JSON.stringify([first, info, episode.messages, episode.reward]);
      } finally {
        await env.close();
      }
    };
    expect(await play()).toBe(await play());
  });
});
