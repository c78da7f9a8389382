// The retail and airline envs end to end: the reward rule (positive and negative), transfer ending the
// episode, the scripted user, the scripted expert's success rate, generated tasks and episode isolation.
import { describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import { unwrap, type Env } from "../../../src/gym/env.js";
import { make } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import { generateTasks, playGold, ScriptedUser, STOP, TAU_AIRLINE_ID, TAU_RETAIL_ID, type TauTask } from "../../../src/envs/tau/index.js";
import { loadTasks, taskFile } from "../../../src/envs/tau/tasks.js";
import { loadBase } from "../../../src/envs/tau/db.js";
import { ToolEnv } from "../../../src/tools/tool-env.js";

registerBundledEnvs();

type TauEnv = Env<ChatObservation, AgentTurn>;
const say = (content: string): AgentTurn => ({ content, toolCalls: [] });
let callId = 0;
const call = (name: string, args: unknown): AgentTurn => ({ content: "", toolCalls: [{ id: `t${++callId}`, name, arguments: JSON.stringify(args) }] });

/** Plays the turns, then keeps answering the user until the episode ends (the scripted user gives up after 40 turns). */
async function play(env: TauEnv, turns: AgentTurn[]) {
  let last: Awaited<ReturnType<TauEnv["step"]>> | undefined;
  for (const t of turns) {
    last = await env.step(t);
    if (last[2] || last[3]) return last;
  }
  for (let k = 0; k < 50 && !last![2] && !last![3]; k++) last = await env.step(say("Is there anything else I can help with?"));
  return last!;
}

describe("tau reward rule", () => {
  it("gold actions and outputs score 1 on every public task", async () => {
    for (const [id, sets] of [
      [TAU_RETAIL_ID, ["train", "dev"]],
      [TAU_AIRLINE_ID, ["dev"]],
    ] as const) {
      for (const taskSet of sets) {
        const env = await make<ChatObservation, AgentTurn>(id, { taskSet });
        const n = env.metadata.taskCount!;
        const failed: number[] = [];
        for (let i = 0; i < n; i += taskSet === "train" ? 7 : 1) if ((await playGold(env, i)).reward !== 1) failed.push(i);
        expect(failed, `${id} ${taskSet}`).toEqual([]);
        await env.close();
      }
    }
  });

  it("a database that differs from the gold replay's scores 0, naming the records", async () => {
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, { taskSet: "train", maxEpisodeSteps: 100 });
    await env.reset({ seed: 1, options: { taskIndex: 0 } });
    const task = (unwrap(env) as ToolEnv<TauTask>).current!.task;
    const gold = task.actions[0]!;
    // Returns only the first item instead of both: a plausible mistake.
    const wrong = { ...gold.kwargs, item_ids: [gold.kwargs.item_ids[0]] };
    const [, reward, terminated, , info] = await play(env, [call(gold.name, wrong), say("Done. Anything else?")]);
    expect(terminated).toBe(true);
    expect(reward).toBe(0);
    expect((info.evidence as any).dbMatch).toBe(false);
    expect((info.evidence as any).differingRecords).toEqual([`orders/${gold.kwargs.order_id}`]);
    await env.close();
  });

  it("doing nothing when a change was wanted scores 0", async () => {
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, { taskSet: "dev", maxEpisodeSteps: 100 });
    await env.reset({ seed: 1, options: { taskIndex: 0 } });
    const [, reward, terminated, , info] = await play(env, [say("I am sorry, I cannot help with that.")]);
    expect(terminated).toBe(true);
    expect(reward).toBe(0);
    expect((info.evidence as any).dbMatch).toBe(false);
    await env.close();
  });

  it("a required output that was never said scores 0; said with commas and other case it counts", async () => {
    const tasks = loadTasks(taskFile("airline", "dev"));
    const index = tasks.findIndex((t) => t.outputs.length === 1 && !t.actions.some((a) => a.name === "transfer_to_human_agents"));
    const output = tasks[index]!.outputs[0]!;
    const env = await make<ChatObservation, AgentTurn>(TAU_AIRLINE_ID);
    const golds = tasks[index]!.actions.map((a) => call(a.name, a.kwargs));

    await env.reset({ seed: 1, options: { taskIndex: index } });
    const [, r0, t0, , info0] = await play(env, [...golds, say("All done."), say("Bye")]);
    expect(t0).toBe(true);
    expect(r0).toBe(0);
    expect((info0.evidence as any).dbMatch).toBe(true);
    expect((info0.evidence as any).missingOutputs).toEqual([output]);

    const withCommas = Number(output).toLocaleString("en-US");
    expect(withCommas).toContain(",");
    await env.reset({ seed: 1, options: { taskIndex: index } });
    const [, r1] = await play(env, [...golds, say(`You SAVED ${withCommas} dollars in total.`), say("Bye")]);
    expect(r1).toBe(1);
    await env.close();
  });

  it("transfer_to_human_agents ends the episode", async () => {
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, { taskSet: "dev" });
    await env.reset({ seed: 2, options: { taskIndex: 1 } });
    const [obs, reward, terminated, truncated, info] = await env.step(call("transfer_to_human_agents", { summary: "The user wants a refund." }));
    expect(obs.messages[0]!.content).toBe("Transfer successful");
    expect(terminated).toBe(true);
    expect(truncated).toBe(false);
    expect(info.finishReason).toBe("transfer_to_human_agents");
    expect(reward).toBe(0);
    await expect(env.step(say("hello"))).rejects.toThrow();
    await env.close();
  });

  it("episodes are isolated: a change in one is not seen by the next, nor by the shared base", async () => {
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, { taskSet: "dev" });
    const base = loadBase("retail");
    const orderId = Object.keys(base.orders!).find((id) => base.orders![id]!.status === "pending")!;
    await env.reset({ seed: 3, options: { taskIndex: 0 } });
    const [first] = await env.step(call("cancel_pending_order", { order_id: orderId, reason: "no longer needed" }));
    expect(JSON.parse(first.messages[0]!.content).status).toBe("cancelled");
    await env.reset({ seed: 3, options: { taskIndex: 0 } });
    const [second] = await env.step(call("get_order_details", { order_id: orderId }));
    expect(JSON.parse(second.messages[0]!.content).status).toBe("pending");
    expect(base.orders![orderId]!.status).toBe("pending");
    await env.close();
  });
});

describe("scripted user", () => {
  const task = loadTasks(taskFile("retail", "train"))[0]!;

  it("gives identity only when asked, confirms only its own change, and stops when it is made", async () => {
    const user = new ScriptedUser("retail", task, loadBase("retail"));
    expect(await user.start()).toMatch(/help/);
    expect(await user.reply("Could you give me your email, or your name and zip code?", [])).toBe("My name is Omar Anderson and my zip code is 19031.");
    const request = await user.reply("How can I help you today?", []);
    expect(request).toContain("#W6067464");
    expect(request).toContain("credit_card_4190576");
    const gold = task.actions[0]!;
    expect(await user.reply("I will cancel order #W6067464. Please confirm (yes/no).", [])).toMatch(/^No/);
    const proposal = `I will return items ${gold.kwargs.item_ids.join(" and ")} of order ${gold.kwargs.order_id} to ${gold.kwargs.payment_method_id}. Do you confirm?`;
    expect(await user.reply(proposal, [])).toMatch(/^Yes/);
    expect(await user.reply("Anything else?", [])).not.toContain(STOP);
    expect(await user.reply("Your return is requested. Anything else?", [{ name: gold.name, kwargs: gold.kwargs }])).toContain(STOP);
  });

  it("gives the airline user id", async () => {
    const t = loadTasks(taskFile("airline", "dev"))[0]!;
    const user = new ScriptedUser("airline", t);
    expect(await user.reply("Please tell me your user id.", [])).toBe(`My user id is ${t.user_id}.`);
  });
});

describe("scripted expert", () => {
  it("reaches reward 1 on at least 90% of the public tasks with the scripted user", async () => {
    let solved = 0;
    let total = 0;
    for (const [id, taskSet, step] of [
      [TAU_RETAIL_ID, "train", 5],
      [TAU_RETAIL_ID, "dev", 1],
      [TAU_AIRLINE_ID, "dev", 1],
    ] as const) {
      const env = await make<ChatObservation, AgentTurn>(id, { taskSet });
      for (let i = 0; i < env.metadata.taskCount!; i += step) {
        const ep = await runExpertEpisode(env, id, { taskIndex: i, maxTurns: 200 });
        total++;
        if (ep.reward === 1) solved++;
        // The expert identifies the user through the dialogue before any change.
        const firstCall = ep.messages.find((m) => m.role === "assistant" && m.toolCalls?.length)!;
        expect(firstCall.role === "assistant" && firstCall.toolCalls![0]!.name).toMatch(/^(find_user_id_by_|get_user_details)/);
      }
      await env.close();
    }
    expect(solved / total).toBeGreaterThanOrEqual(0.9);
  });

  it("solves generated tasks at every difficulty, which are deterministic in their seed", async () => {
    for (const domain of ["retail", "airline"] as const) {
      for (const difficulty of ["easy", "medium", "hard"] as const) {
        const tasks = generateTasks(domain, { count: 8, seed: 5, difficulty });
        expect(generateTasks(domain, { count: 8, seed: 5, difficulty })).toEqual(tasks);
        const [lo, hi] = { easy: [1, 1], medium: [2, 3], hard: [4, 6] }[difficulty];
        for (const t of tasks) expect(t.actions.length >= lo! && t.actions.length <= hi!).toBe(true);
        const id = domain === "retail" ? TAU_RETAIL_ID : TAU_AIRLINE_ID;
        const env = await make<ChatObservation, AgentTurn>(id, { taskSet: "generated", difficulty, count: 8, taskSeed: 5 });
        for (let i = 0; i < 8; i++) {
          const ep = await runExpertEpisode(env, id, { taskIndex: i, maxTurns: 200 });
          expect(ep.reward, `${domain} ${difficulty} ${i}: ${JSON.stringify(ep.info)}`).toBe(1);
        }
        await env.close();
      }
    }
  });

  it("rejects unknown options with the list of known ones", async () => {
    await expect(make(TAU_RETAIL_ID, { taskset: "dev" })).rejects.toThrow(/known options/);
    await expect(make(TAU_AIRLINE_ID, { taskSet: "train" })).rejects.toThrow(/no "train" task set/);
  });
});
