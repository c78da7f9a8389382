/**
 * The restapi env over its real HTTP server on 127.0.0.1: deterministic world and tasks, the
 * endpoints and their OpenAPI 3.1 document, tools generated from it (enum parameters included),
 * the reward (numeric tolerance, normalized text), each fault kind reaching the agent as a readable
 * error while the episode goes on, the scripted expert on every task kind, and a clean close.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import { checkEnv, formatCheckReport, sampledActions } from "../../../src/gym/check.js";
import { make } from "../../../src/gym/registry.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import {
  answerMatches,
  chainProgress,
  createRestApiEnv,
  ENDPOINTS,
  generateRestTasks,
  registerRestApiSuite,
  replayRestApi,
  restTaskKinds,
  RestWorld,
  RESTAPI_ENV_ID,
  type RestApiEnv,
} from "../../../src/envs/restapi/index.js";
import type { GoldCall } from "../../../src/envs/restapi/tasks.js";

registerRestApiSuite();

const call = (name: string, args: Record<string, unknown>): AgentTurn => ({ content: "", toolCalls: [{ id: "c1", name, arguments: JSON.stringify(args) }] });

let env: RestApiEnv;
beforeAll(async () => {
  env = await createRestApiEnv({ count: 24 });
});
afterAll(async () => {
  await env.close();
});

describe("world and tasks", () => {
  it("are deterministic per seed and differ between seeds", () => {
    const a = new RestWorld(3);
    const b = new RestWorld(3);
    expect(JSON.stringify(generateRestTasks(a, { count: 40 }))).toBe(JSON.stringify(generateRestTasks(b, { count: 40 })));
    expect(a.companies).toEqual(b.companies);
    expect(new RestWorld(4).companies).not.toEqual(a.companies);
    expect(generateRestTasks(new RestWorld(4), { count: 40 }).map((t) => t.answer)).not.toEqual(generateRestTasks(a, { count: 40 }).map((t) => t.answer));
  });

  it("need as many calls as their level, cover every template, and filter by level", () => {
    const tasks = generateRestTasks(new RestWorld(0), { count: 24 });
    for (const t of tasks) expect(t.chain).toHaveLength(t.level);
    const kinds = restTaskKinds();
    expect(new Set(tasks.map((t) => t.kind))).toEqual(new Set(Object.values(kinds).flat()));
    expect(generateRestTasks(new RestWorld(0), { count: 8, levels: [4] }).every((t) => t.level === 4)).toBe(true);
    expect(() => generateRestTasks(new RestWorld(0), { count: 2, levels: [5] })).toThrow(/level 5/);
  });
});

describe("the HTTP API", () => {
  it("serves its OpenAPI 3.1 document: 28 operations over 8 services, enum parameters", async () => {
    const doc = (await (await fetch(`${env.server.url}/openapi.json`)).json()) as any;
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.servers[0].url).toBe(env.server.url);
    expect(Object.keys(doc.paths)).toHaveLength(ENDPOINTS.length);
    expect(ENDPOINTS.length).toBeGreaterThanOrEqual(28);
    expect(doc.tags.map((t: { name: string }) => t.name).sort()).toEqual(["calendar", "currency", "flights", "geography", "recipes", "stocks", "units", "weather"]);
    const cabin = doc.paths["/flights/search"].get.parameters.find((p: { name: string }) => p.name === "cabin");
    expect(cabin.schema.enum).toEqual(["economy", "business"]);
  });

  it("answers from the world and rejects bad requests with clear messages", async () => {
    const base = env.server.url;
    const w = (await (await fetch(`${base}/weather/current?city=Osaka&units=imperial`)).json()) as any;
    expect(w).toMatchObject({ city: "Osaka", temperature_unit: "F" });
    const flights = (await (await fetch(`${base}/flights/search?from=CDG&to=HND&date=2025-06-10&sort=price`)).json()) as any;
    const prices = flights.flights.map((f: { price: number }) => f.price);
    expect(prices).toEqual([...prices].sort((a, b) => a - b));
    const conv = (await (await fetch(`${base}/units/convert?value=42.195&from=km&to=mi`)).json()) as any;
    expect(conv.result).toBeCloseTo(26.2188, 4);
    const bad = async (path: string, status: number, message: RegExp) => {
      const r = await fetch(`${base}${path}`);
      expect(r.status).toBe(status);
      expect(((await r.json()) as any).error).toMatch(message);
    };
    await bad("/weather/current?city=Paris&units=kelvin", 400, /units.*one of metric, imperial/);
    await bad("/weather/current", 400, /missing required query parameter "city"/);
    await bad("/weather/current?city=Atlantis", 404, /unknown city "Atlantis"/);
    await bad("/units/convert?value=1&from=kg&to=mi", 400, /cannot convert kilogram/);
    await bad("/geo/countries?colour=red", 400, /unknown query parameter/);
    await bad("/calendar/weekday?date=2025-02-30", 400, /real date/);
    await bad("/nowhere", 404, /no endpoint/);
    expect((await fetch(`${base}/geo/countries`, { method: "POST" })).status).toBe(405);
  });

  it("is what the agent's tools call; a bad enum is refused by the tool's schema", async () => {
    const [obs] = await env.reset({ seed: 1, options: { taskIndex: 0 } });
    const names = obs.tools!.map((t) => t.name);
    expect(names).toHaveLength(ENDPOINTS.length + 1);
    expect(names).toEqual(expect.arrayContaining(["getCurrentWeather", "searchFlights", "convertCurrency", "getRecipeNutrition", "submit_answer"]));
    const search = obs.tools!.find((t) => t.name === "searchFlights")!;
    expect((search.parameters as any).properties.sort.enum).toEqual(["price", "departure", "duration"]);
    const [o1, , done1] = await env.step(call("getCountry", { code: "JP" }));
    expect(JSON.parse(o1.messages[0]!.content)).toMatchObject({ capital: "Tokyo", currency: "JPY" });
    expect(done1).toBe(false);
    const [o2, , , , info] = await env.step(call("getCurrentWeather", { city: "Tokyo", units: "kelvin" }));
    expect(o2.messages[0]).toMatchObject({ isError: true });
    expect(o2.messages[0]!.content).toMatch(/units/);
    expect((info.toolErrors as { kind: string }[])[0]!.kind).toBe("invalid_arguments");
  });
});

describe("reward", () => {
  it("numbers within tolerance, text after normalization; wrong or missing answers score 0", async () => {
    expect(answerMatches(26.2188, "26.2188 miles")).toBe(true);
    expect(answerMatches(1234.5, "1,234.50")).toBe(true);
    expect(answerMatches(12.3, 12.305)).toBe(true);
    expect(answerMatches(12.3, 12.4)).toBe(false);
    expect(answerMatches("Tuesday", " tuesday. ")).toBe(true);
    expect(answerMatches("Tuesday", "Wednesday")).toBe(false);

    const task = env.hooks.tasks.get(0);
    const play = async (answer: unknown) => {
      await env.reset({ seed: 0, options: { taskIndex: 0 } });
      const [, reward, terminated, , info] = await env.step(call("submit_answer", { answer }));
      expect(terminated).toBe(true);
      return { reward, evidence: info.evidence as Record<string, unknown> };
    };
    const right = await play(task.answer);
    expect(right.reward).toBe(1);
    expect(right.evidence).toMatchObject({ expected: task.answer, match: true, level: task.level });
    const wrong = await play(typeof task.answer === "number" ? task.answer + 1 : "nonsense");
    expect(wrong.reward).toBe(0);
    expect(wrong.evidence.match).toBe(false);

    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const [, reward, terminated, , info] = await env.step({ content: "I think it is 3.", toolCalls: [] });
    expect([reward, terminated]).toEqual([0, true]);
    expect((info.evidence as { reason: string }).reason).toMatch(/no answer was submitted/);
  });

  it("reports progress after every step: the gold chain's calls made (same tool, matching arguments) and a right answer", async () => {
    const chain: GoldCall[] = [
      { tool: "getCurrentWeather", args: { city: "Pretoria", units: "imperial" } },
      { tool: "convertUnits", args: { value: 65.8, from: "F", to: "C" } },
    ];
    const made = (name: string, args: unknown) => ({ name, arguments: JSON.stringify(args) });
    expect(chainProgress(chain, [], false)).toBe(0);
    expect(chainProgress(chain, [made("getCurrentWeather", { city: "pretoria", units: "imperial" })], false)).toBeCloseTo(1 / 3);
    // The right tool with some arguments wrong or missing: partial credit for the tool and each right argument.
    expect(chainProgress(chain, [made("getCurrentWeather", { city: "Brasilia", units: "imperial" })], false)).toBeCloseTo(2 / 3 / 3);
    expect(chainProgress(chain, [made("getCurrentWeather", { city: "Pretoria" })], false)).toBeCloseTo(2 / 3 / 3);
    expect(chainProgress(chain, [{ name: "getCurrentWeather", arguments: "{not json" }], false)).toBeCloseTo(1 / 3 / 3);
    expect(chainProgress(chain, [made("getAirQuality", { city: "Pretoria" })], false)).toBe(0);
    // The closest call counts, not the last.
    expect(chainProgress(chain, [made("getCurrentWeather", { city: "Pretoria", units: "imperial" }), made("getCurrentWeather", { city: "Oslo" })], false)).toBeCloseTo(1 / 3);
    expect(chainProgress(chain, [made("getCurrentWeather", { city: "Pretoria", units: "imperial" }), made("convertUnits", { value: "65.8", from: "F", to: "C" })], true)).toBe(1);

    // Through the env: the expert's episode reports 1; the right call with a wrong answer 1/2 (level 1).
    const level1 = await createRestApiEnv({ count: 6, levels: [1] });
    try {
      expect(level1.metadata.reportsProgress).toBe(true);
      const expert = await runExpertEpisode(level1, RESTAPI_ENV_ID, { taskIndex: 0 });
      expect(expert.info.progress).toBe(1);
      const task = level1.hooks.tasks.get(0);
      const [, opened] = await level1.reset({ seed: 0, options: { taskIndex: 0 } });
      expect(opened.progress).toBe(0);
      const [, , , , called] = await level1.step(call(task.chain[0]!.tool, task.chain[0]!.args));
      expect(called.progress).toBe(0.5);
      const [, reward, , , info] = await level1.step(call("submit_answer", { answer: "nonsense" }));
      expect(reward).toBe(0);
      expect(info.progress).toBe(0.5);
    } finally {
      await level1.close();
    }
  });
});

describe("scripted expert", () => {
  it("solves every task of every kind and level (reads the answer off the API)", async () => {
    for (let i = 0; i < env.hooks.tasks.size; i++) {
      const ep = await runExpertEpisode(env, RESTAPI_ENV_ID, { taskIndex: i });
      expect(ep.reward, JSON.stringify(ep.info.evidence)).toBe(1);
      expect(ep.turns).toBe(env.hooks.tasks.get(i).level + 1);
    }
  });

  it('with tools "used", sees only the tools its tasks call and still solves every task', async () => {
    const local = await createRestApiEnv({ count: 12, levels: [1], tools: "used" });
    try {
      const names = local.hooks.tools.map((t) => t.name).sort();
      const used = new Set<string>(["submit_answer"]);
      for (let i = 0; i < local.hooks.tasks.size; i++) for (const c of local.hooks.tasks.get(i).chain) used.add(c.tool);
      expect(names).toEqual([...used].sort());
      expect(names.length).toBeLessThan(env.hooks.tools.length);
      for (let i = 0; i < local.hooks.tasks.size; i++) expect((await runExpertEpisode(local, RESTAPI_ENV_ID, { taskIndex: i })).reward).toBe(1);
    } finally {
      await local.close();
    }
    await expect(createRestApiEnv({ tools: "some" as never })).rejects.toThrow(/options.tools must be "all" or "used"/);
  });

  it("with wideValues, draws currency amounts, unit values and weekday dates from wide ranges, the other kinds as before, and still solves every task", async () => {
    const world = new RestWorld(0);
    const narrow = generateRestTasks(world, { count: 600, levels: [1] });
    const wide = generateRestTasks(world, { count: 600, levels: [1], wideValues: true });
    const of = (tasks: typeof wide, kind: string) => tasks.filter((t) => t.kind === kind);
    // Every kind other than these three makes the same tasks.
    for (const kind of restTaskKinds()[1].filter((k) => !["currency_convert", "unit_convert", "weekday"].includes(k))) expect(of(wide, kind)).toEqual(of(narrow, kind));
    const amounts = of(wide, "currency_convert").map((t) => Number(t.chain[0]!.args.amount));
    expect(amounts.every((a) => Number.isInteger(a) && a >= 1 && a <= 9_999)).toBe(true);
    expect(new Set(amounts).size).toBeGreaterThan(90);
    expect(new Set(of(narrow, "currency_convert").map((t) => t.chain[0]!.args.amount)).size).toBeLessThanOrEqual(7);
    const values = of(wide, "unit_convert").map((t) => Number(t.chain[0]!.args.value));
    expect(values.every((v) => Number.isInteger(v) && v >= 1 && v <= 9_999)).toBe(true);
    expect(new Set(values).size).toBeGreaterThan(90);
    const dates = of(wide, "weekday").map((t) => String(t.chain[0]!.args.date));
    expect(dates.every((d) => d >= "1950-01-01" && d <= "2049-12-31")).toBe(true);
    expect(dates.some((d) => d < "2000-01-01")).toBe(true);
    expect(dates.some((d) => d > "2030-01-01")).toBe(true);
    const local = await createRestApiEnv({ count: 24, levels: [1], tools: "used", wideValues: true });
    try {
      for (let i = 0; i < local.hooks.tasks.size; i++) expect((await runExpertEpisode(local, RESTAPI_ENV_ID, { taskIndex: i })).reward).toBe(1);
    } finally {
      await local.close();
    }
    await expect(createRestApiEnv({ wideValues: "yes" as never })).rejects.toThrow(/options.wideValues must be true or false/);
  });

  it("with kinds, makes only the listed templates, each level cycling over its own, and refuses kinds that do not exist or leave a level empty", async () => {
    const world = new RestWorld(0);
    const tasks = generateRestTasks(world, { count: 40, levels: [1, 2], kinds: ["unit_convert", "weekday", "capital_population"] });
    expect(tasks.filter((t) => t.level === 1).map((t) => t.kind).slice(0, 4)).toEqual(["unit_convert", "weekday", "unit_convert", "weekday"]);
    expect(new Set(tasks.filter((t) => t.level === 2).map((t) => t.kind))).toEqual(new Set(["capital_population"]));
    // A level with one listed kind makes only that kind.
    expect(generateRestTasks(world, { count: 5, levels: [1], kinds: ["stock_price"] }).every((t) => t.kind === "stock_price")).toBe(true);
    expect(() => generateRestTasks(world, { levels: [1], kinds: ["unit_conversion"] })).toThrow(/task kind "unit_conversion" does not exist; the kinds are current_temperature, currency_convert/);
    expect(() => generateRestTasks(world, { levels: [1, 2], kinds: ["unit_convert"] })).toThrow(/none of the kinds unit_convert is at level 2; its kinds are capital_temperature/);
    expect(() => generateRestTasks(world, { levels: [1], kinds: [] })).toThrow(/options.kinds is empty/);
    const local = await createRestApiEnv({ count: 12, levels: [1], tools: "used", kinds: ["unit_convert", "currency_convert"], wideValues: true });
    try {
      // Only the tools the listed kinds call (and submit_answer) are shown.
      expect(local.hooks.tools.map((t) => t.name).sort()).toEqual(["convertCurrency", "convertUnits", "submit_answer"]);
      for (let i = 0; i < local.hooks.tasks.size; i++) expect((await runExpertEpisode(local, RESTAPI_ENV_ID, { taskIndex: i })).reward).toBe(1);
    } finally {
      await local.close();
    }
    await expect(createRestApiEnv({ kinds: "unit_convert" as never })).rejects.toThrow(/options.kinds must be a list of task kinds/);
  });

  it("replay reports every task solved", async () => {
    const report = await replayRestApi(RESTAPI_ENV_ID, { gold: false, limit: 8 });
    expect(report).toMatchObject({ total: 8, succeeded: 8, expectedRate: 1, failures: [] });
  });
});

describe("faults", () => {
  const cases = [
    ["5xx", /HTTP 503 .*temporarily unavailable/],
    ["slow", /got no answer within 300 ms/],
    ["malformed", /not valid JSON/],
  ] as const;
  for (const [kind, message] of cases) {
    it(`${kind}: a readable error observation, the episode goes on, and a retry succeeds`, async () => {
      const local = await createRestApiEnv({ count: 8, requestTimeoutMs: 300, faults: { plan: [{ request: 1, kind }] } });
      try {
        await local.reset({ seed: 5, options: { taskIndex: 0 } });
        const gold = local.current!.task.chain[0]!;
        const [o1, r1, t1, tr1, info] = await local.step(call(gold.tool, gold.args));
        expect(o1.messages[0]).toMatchObject({ role: "tool", isError: true });
        expect(o1.messages[0]!.content).toMatch(message);
        expect([r1, t1, tr1]).toEqual([0, false, false]);
        expect((info.toolErrors as { kind: string }[])[0]!.kind).toBe("tool_error");
        const [o2] = await local.step(call(gold.tool, gold.args));
        expect(o2.messages[0]).not.toHaveProperty("isError");
        expect(() => JSON.parse(o2.messages[0]!.content)).not.toThrow();
        expect(local.server.injected).toEqual([{ request: 1, kind, path: expect.any(String) }]);
      } finally {
        await local.close();
      }
    });
  }

  it("random faults repeat with the episode seed, and the expert retries through them", async () => {
    const noisy = await createRestApiEnv({ count: 12, requestTimeoutMs: 200, faults: { rate: 0.3, kinds: ["5xx", "malformed", "slow"] } });
    try {
      const injectedFor = async (seed: number) => {
        const ep = await runExpertEpisode(noisy, RESTAPI_ENV_ID, { taskIndex: 10, seed });
        expect(ep.reward, JSON.stringify(ep.info.evidence)).toBe(1);
        return (ep.info.evidence as { faults: unknown[] }).faults;
      };
      const seeds = [1, 2, 3, 4];
      const first = [];
      for (const s of seeds) first.push(await injectedFor(s));
      expect(first.some((f) => f.length > 0)).toBe(true);
      expect(await injectedFor(3)).toEqual(first[2]);
    } finally {
      await noisy.close();
    }
  });

  it("per-task faults: every task has one planned fault and the expert still solves it", async () => {
    const local = await createRestApiEnv({ count: 6, requestTimeoutMs: 200, taskFaults: ["5xx", "malformed", "slow"] });
    try {
      for (let i = 0; i < 6; i++) {
        const ep = await runExpertEpisode(local, RESTAPI_ENV_ID, { taskIndex: i });
        expect(ep.reward).toBe(1);
        expect((ep.info.evidence as { faults: unknown[] }).faults).toHaveLength(1);
      }
    } finally {
      await local.close();
    }
  });
});

describe("options, registry and close", () => {
  it("unknown or malformed options are errors that name the options", async () => {
    await expect(createRestApiEnv({ colour: 1 } as never)).rejects.toThrow(/unknown option\(s\) colour; the options are seed/);
    await expect(createRestApiEnv({ faults: { rate: 2 } })).rejects.toThrow(/rate must be a number in \[0, 1\]/);
    await expect(createRestApiEnv({ faults: { kinds: ["fire"] as never } })).rejects.toThrow(/"5xx", "slow", "malformed"/);
  });

  it("passes checkEnv from the registry, and its server is gone after close", async () => {
    const made = await make(RESTAPI_ENV_ID, { maxEpisodeSteps: 4 });
    const report = await checkEnv(made, { seed: 11, episodes: 2, maxSteps: 6, actions: sampledActions(made) });
    expect(report.passed, formatCheckReport(report)).toBe(true);
    const local = await createRestApiEnv({ count: 2 });
    const url = local.server.url;
    expect((await fetch(`${url}/openapi.json`)).ok).toBe(true);
    await local.close();
    await local.close();
    await expect(fetch(`${url}/openapi.json`)).rejects.toThrow();
  });
});
