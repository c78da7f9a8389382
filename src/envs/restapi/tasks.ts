/**
 * restapi tasks: questions that need 1 to 4 chained API calls (the difficulty level is the number of
 * calls), each with its answer computed from the world and its gold chain — the exact tool calls, in
 * order, whose last result holds the answer at `answerPath`. Later calls' arguments are what earlier
 * calls return (a capital, an airport code, a price), resolved here from the world.
 *
 * Deterministic in (world seed, task seed, count, levels). This file does not call the API or judge
 * submissions.
 */
import { Rng } from "../../core/index.js";
import type { FaultKind } from "./server.js";
import { CABINS, FLIGHT_DATES, addDays, celsiusToFahrenheit, daysBetween, greatCircleKm, round, weekday, type RestWorld } from "./world.js";

export type Level = 1 | 2 | 3 | 4;
export const LEVELS: readonly Level[] = [1, 2, 3, 4];

export interface GoldCall {
  tool: string;
  args: Record<string, string | number>;
}

export interface RestTask {
  id: string;
  /** Template name, e.g. "flight_price_local". */
  kind: string;
  /** Number of API calls the gold chain makes. */
  level: Level;
  question: string;
  answer: string | number;
  chain: GoldCall[];
  /** Where the answer sits in the last call's JSON result, e.g. "flights.0.price". */
  answerPath: string;
  /** Faults planned for this task's episodes (request numbers are 1-based). */
  faults?: { request: number; kind: FaultKind }[];
}

type Made = Omit<RestTask, "id" | "level" | "kind" | "faults">;
/** How a template draws its values: `wide` draws currency amounts, unit values and weekday dates from wide ranges. */
interface Draw {
  wide: boolean;
}
type Template = (w: RestWorld, r: Rng, o: Draw) => Made;

const call = (tool: string, args: Record<string, string | number>): GoldCall => ({ tool, args });
const flightDate = (r: Rng) => addDays(FLIGHT_DATES.from, r.int(daysBetween(FLIGHT_DATES.from, FLIGHT_DATES.to) + 1));
const pickTwo = <T>(r: Rng, items: readonly T[]): [T, T] => {
  const a = r.pick(items);
  let b = r.pick(items);
  while (b === a) b = r.pick(items);
  return [a, b];
};
const AMOUNTS = [20, 75, 100, 250, 480, 1000, 1500];
/** With `wideValues`: whole amounts and unit values 1 to 9,999, and dates over a century (36,525 days). */
const WIDE_AMOUNT_MAX = 9_999;
const wideWhole = (r: Rng) => 1 + r.int(WIDE_AMOUNT_MAX);
const WIDE_DATES = { from: "1950-01-01", to: "2049-12-31" };
const UNIT_QUESTIONS: [string, string, number[], string][] = [
  ["km", "mi", [5, 21.1, 42.195, 100], "kilometres in miles"],
  ["lb", "kg", [3, 12, 150], "pounds in kilograms"],
  ["f", "c", [0, 68, 98.6, 451], "degrees Fahrenheit in degrees Celsius"],
  ["gal", "l", [1, 5, 12], "US gallons in litres"],
  ["cup", "ml", [0.5, 2, 3], "US cups in millilitres"],
  ["ft", "m", [6, 100, 29029], "feet in metres"],
];

const TEMPLATES: Record<Level, [string, Template][]> = {
  1: [
    [
      "current_temperature",
      (w, r) => {
        const city = r.pick(w.cities);
        const units = r.pick(["metric", "imperial"] as const);
        const t = w.currentWeather(city).temperature;
        return {
          question: `What is the current temperature in ${city.name}, in degrees ${units === "metric" ? "Celsius" : "Fahrenheit"}?`,
          answer: units === "metric" ? t : celsiusToFahrenheit(t),
          chain: [call("getCurrentWeather", { city: city.name, units })],
          answerPath: "temperature",
        };
      },
    ],
    [
      "currency_convert",
      (w, r, o) => {
        const [from, to] = pickTwo(r, [...w.usdRates.keys()]);
        const amount = o.wide ? wideWhole(r) : r.pick(AMOUNTS);
        return {
          question: `How much is ${amount} ${from} in ${to} at today's exchange rate? Give the amount in ${to}, rounded to cents.`,
          answer: w.convert(amount, from, to),
          chain: [call("convertCurrency", { from, to, amount })],
          answerPath: "result",
        };
      },
    ],
    [
      "unit_convert",
      (w, r, o) => {
        const [from, to, values, words] = r.pick(UNIT_QUESTIONS);
        const value = o.wide ? wideWhole(r) : r.pick(values);
        return {
          question: `Convert ${value} ${words} (to 4 decimals).`,
          answer: w.convertUnits(value, from, to),
          chain: [call("convertUnits", { value, from, to })],
          answerPath: "result",
        };
      },
    ],
    [
      "weekday",
      (_w, r, o) => {
        const d = o.wide ? addDays(WIDE_DATES.from, r.int(daysBetween(WIDE_DATES.from, WIDE_DATES.to) + 1)) : addDays("2025-01-01", r.int(365 * 2));
        return { question: `On which day of the week is ${d}?`, answer: weekday(d), chain: [call("getWeekday", { date: d })], answerPath: "weekday" };
      },
    ],
    [
      "stock_price",
      (w, r) => {
        const c = r.pick(w.companies);
        return {
          question: `What was the latest closing price of ${c.symbol} stock, in US dollars?`,
          answer: w.quote(c).price,
          chain: [call("getStockQuote", { symbol: c.symbol })],
          answerPath: "price",
        };
      },
    ],
    [
      "air_quality",
      (w, r) => {
        const city = r.pick(w.cities);
        return { question: `What is the air quality index (AQI) in ${city.name} right now?`, answer: w.airQuality(city).aqi, chain: [call("getAirQuality", { city: city.name })], answerPath: "aqi" };
      },
    ],
  ],
  2: [
    [
      "capital_temperature",
      (w, r) => {
        const c = r.pick(w.countries);
        return {
          question: `What is the current temperature, in degrees Celsius, in the capital of ${c.name}?`,
          answer: w.currentWeather(w.city(c.capital)!).temperature,
          chain: [call("getCountry", { code: c.code }), call("getCurrentWeather", { city: c.capital, units: "metric" })],
          answerPath: "temperature",
        };
      },
    ],
    [
      "capital_population",
      (w, r) => {
        const c = r.pick(w.countries);
        return {
          question: `How many people live in the capital city of ${c.name} (the city's population, not the country's)?`,
          answer: w.city(c.capital)!.population,
          chain: [call("getCountry", { code: c.code }), call("getCity", { name: c.capital })],
          answerPath: "population",
        };
      },
    ],
    [
      "stock_price_converted",
      (w, r) => {
        const c = r.pick(w.companies);
        const to = r.pick([...w.usdRates.keys()].filter((k) => k !== "USD"));
        const price = w.quote(c).price;
        return {
          question: `What is the latest closing price of ${c.symbol} expressed in ${to}, rounded to cents?`,
          answer: w.convert(price, "USD", to),
          chain: [call("getStockQuote", { symbol: c.symbol }), call("convertCurrency", { from: "USD", to, amount: price })],
          answerPath: "result",
        };
      },
    ],
    [
      "recipe_calories",
      (w, r) => {
        const recipe = r.pick(w.recipes);
        const servings = r.range(2, 8);
        return {
          question: `How many kilocalories are in ${servings} servings of ${recipe.name}?`,
          answer: w.recipeNutrition(recipe, servings).calories,
          chain: [call("searchRecipes", { query: recipe.name }), call("getRecipeNutrition", { recipe_id: recipe.id, servings })],
          answerPath: "calories",
        };
      },
    ],
    [
      "holiday_weekday",
      (w, r) => {
        const c = r.pick(w.countries);
        const holidays = w.holidays.get(c.code)!;
        const national = holidays.find((h) => h.name !== "New Year's Day" && h.name !== "Christmas Day") ?? holidays[0]!;
        const date = `2025-${national.date}`;
        return {
          question: `${c.name} celebrates ${national.name} in 2025. On which day of the week does it fall?`,
          answer: weekday(date),
          chain: [call("listHolidays", { country: c.code, year: 2025 }), call("getWeekday", { date })],
          answerPath: "weekday",
        };
      },
    ],
  ],
  3: [
    [
      "cheapest_flight",
      (w, r) => {
        const [a, b] = pickTwo(r, w.cities);
        const day = flightDate(r);
        const cabin = r.pick(CABINS);
        const fares = w.flightsOn(a.airport, b.airport, day, cabin).map((f) => f.price);
        return {
          question: `What is the cheapest ${cabin} fare, in US dollars, for a direct flight from ${a.name} to ${b.name} on ${day}?`,
          answer: Math.min(...fares),
          chain: [
            call("listAirports", { city: a.name }),
            call("listAirports", { city: b.name }),
            call("searchFlights", { from: a.airport, to: b.airport, date: day, cabin, sort: "price" }),
          ],
          answerPath: "flights.0.price",
        };
      },
    ],
    [
      "capitals_distance",
      (w, r) => {
        const [a, b] = pickTwo(r, w.countries);
        return {
          question: `How far apart, in kilometres (great-circle distance), are the capitals of ${a.name} and ${b.name}?`,
          answer: greatCircleKm(w.city(a.capital)!, w.city(b.capital)!),
          chain: [call("getCountry", { code: a.code }), call("getCountry", { code: b.code }), call("getDistance", { from: a.capital, to: b.capital })],
          answerPath: "km",
        };
      },
    ],
    [
      "recipe_kilojoules",
      (w, r) => {
        const recipe = r.pick(w.recipes);
        const servings = r.range(2, 6);
        const kcal = w.recipeNutrition(recipe, servings).calories;
        return {
          question: `How much energy, in kilojoules, do ${servings} servings of ${recipe.name} provide? (4 decimals)`,
          answer: w.convertUnits(kcal, "kcal", "kj"),
          chain: [
            call("searchRecipes", { query: recipe.name }),
            call("getRecipeNutrition", { recipe_id: recipe.id, servings }),
            call("convertUnits", { value: kcal, from: "kcal", to: "kj" }),
          ],
          answerPath: "result",
        };
      },
    ],
    [
      "company_price_converted",
      (w, r) => {
        const c = r.pick(w.companies);
        const to = r.pick([...w.usdRates.keys()].filter((k) => k !== "USD"));
        const price = w.quote(c).price;
        return {
          question: `What is the latest closing share price of ${c.name} in ${to}, rounded to cents?`,
          answer: w.convert(price, "USD", to),
          chain: [call("searchStocks", { query: c.name }), call("getStockQuote", { symbol: c.symbol }), call("convertCurrency", { from: "USD", to, amount: price })],
          answerPath: "result",
        };
      },
    ],
  ],
  4: [
    [
      "flight_price_local",
      (w, r) => {
        const [a, b] = pickTwo(r, w.cities);
        const day = flightDate(r);
        const currency = w.country(b.country)!.currency === "USD" ? "EUR" : w.country(b.country)!.currency;
        const cheapest = Math.min(...w.flightsOn(a.airport, b.airport, day, "economy").map((f) => f.price));
        return {
          question: `What does the cheapest direct economy flight from ${a.name} to ${b.name} on ${day} cost in ${currency}, rounded to cents?`,
          answer: w.convert(cheapest, "USD", currency),
          chain: [
            call("listAirports", { city: a.name }),
            call("listAirports", { city: b.name }),
            call("searchFlights", { from: a.airport, to: b.airport, date: day, cabin: "economy", sort: "price" }),
            call("convertCurrency", { from: "USD", to: currency, amount: cheapest }),
          ],
          answerPath: "result",
        };
      },
    ],
    [
      "capitals_distance_miles",
      (w, r) => {
        const [a, b] = pickTwo(r, w.countries);
        const km = greatCircleKm(w.city(a.capital)!, w.city(b.capital)!);
        return {
          question: `How far apart, in miles (great-circle distance, 4 decimals), are the capitals of ${a.name} and ${b.name}?`,
          answer: w.convertUnits(km, "km", "mi"),
          chain: [
            call("getCountry", { code: a.code }),
            call("getCountry", { code: b.code }),
            call("getDistance", { from: a.capital, to: b.capital }),
            call("convertUnits", { value: km, from: "km", to: "mi" }),
          ],
          answerPath: "result",
        };
      },
    ],
    [
      "company_home_weather",
      (w, r) => {
        const c = r.pick(w.companies);
        const country = w.country(c.country)!;
        const units = r.pick(["metric", "imperial"] as const);
        const t = w.currentWeather(w.city(country.capital)!).temperature;
        return {
          question: `${c.name} is headquartered in some country. What is the current temperature, in degrees ${units === "metric" ? "Celsius" : "Fahrenheit"}, in that country's capital?`,
          answer: units === "metric" ? t : celsiusToFahrenheit(t),
          chain: [
            call("searchStocks", { query: c.name }),
            call("getCompanyProfile", { symbol: c.symbol }),
            call("getCountry", { code: country.code }),
            call("getCurrentWeather", { city: country.capital, units }),
          ],
          answerPath: "temperature",
        };
      },
    ],
  ],
};

export interface RestTaskOptions {
  /** Number of tasks (default 120). */
  count?: number;
  /** Seed of the task generator. */
  seed?: number;
  /** Levels to include, cycled in order (all by default). */
  levels?: readonly number[];
  /** Give every task one planned fault, cycling over these kinds, on one of its requests. */
  faultKinds?: readonly FaultKind[];
  /**
   * Draw currency amounts and unit conversions' values (1 to 9,999 instead of a few each) and weekday dates (1950 to 2049 instead of two
   * years) from wide ranges, so that nearly every such question is new and none can be answered from
   * memory of the training questions.
   */
  wideValues?: boolean;
  /**
   * Only these templates (by kind, e.g. `unit_convert`; see `restTaskKinds`), each level cycling over
   * its own that are listed. Every listed kind must exist, and every level asked for must keep one.
   */
  kinds?: readonly string[];
}

/** Each level's templates, narrowed to `kinds` when given (with an error naming what is wrong). */
function templatesOf(levels: readonly number[], kinds: readonly string[] | undefined): Record<number, [string, Template][]> {
  const known = Object.values(TEMPLATES).flatMap((ts) => ts.map((t) => t[0]));
  for (const k of kinds ?? []) if (!known.includes(k)) throw new RangeError(`restapi: task kind "${k}" does not exist; the kinds are ${known.join(", ")}`);
  const out: Record<number, [string, Template][]> = {};
  for (const l of levels) {
    out[l] = TEMPLATES[l as Level].filter((t) => !kinds || kinds.includes(t[0]));
    if (out[l]!.length === 0) throw new RangeError(`restapi: none of the kinds ${kinds!.join(", ")} is at level ${l}; its kinds are ${TEMPLATES[l as Level].map((t) => t[0]).join(", ")}`);
  }
  return out;
}

export function generateRestTasks(world: RestWorld, options: RestTaskOptions = {}): RestTask[] {
  const count = options.count ?? 120;
  const levels = options.levels ?? LEVELS;
  for (const l of levels) if (!LEVELS.includes(l as Level)) throw new RangeError(`restapi: level ${l} does not exist; levels are 1, 2, 3 and 4 (the number of calls)`);
  if (levels.length === 0) throw new RangeError("restapi: options.levels is empty; give at least one of 1, 2, 3, 4");
  if (options.kinds && options.kinds.length === 0) throw new RangeError("restapi: options.kinds is empty; leave it out for every kind, or name at least one");
  const byLevel = templatesOf(levels, options.kinds);
  const rng = new Rng(options.seed ?? world.seed);
  const tasks: RestTask[] = [];
  for (let i = 0; i < count; i++) {
    const level = levels[i % levels.length] as Level;
    const templates = byLevel[level]!;
    const [kind, make] = templates[Math.floor(i / levels.length) % templates.length]!;
    const made = make(world, rng.fork(i), { wide: options.wideValues ?? false });
    if (made.chain.length !== level) throw new Error(`restapi template ${kind} makes ${made.chain.length} calls but is listed at level ${level}`);
    if (typeof made.answer === "number" && !Number.isFinite(made.answer)) throw new Error(`restapi template ${kind} has no finite answer`);
    const task: RestTask = { id: `restapi-${i}`, kind, level, ...made, answer: typeof made.answer === "number" ? round(made.answer, 4) : made.answer };
    if (options.faultKinds?.length) task.faults = [{ request: 1 + (i % level), kind: options.faultKinds[i % options.faultKinds.length]! }];
    tasks.push(task);
  }
  return tasks;
}

/** The task templates by level, for docs and tests. */
export function restTaskKinds(): Record<Level, string[]> {
  return { 1: TEMPLATES[1].map((t) => t[0]), 2: TEMPLATES[2].map((t) => t[0]), 3: TEMPLATES[3].map((t) => t[0]), 4: TEMPLATES[4].map((t) => t[0]) };
}
