/**
 * The restapi endpoints: 28 read-only GET operations over eight services, each declared once (path,
 * operation id, summary, parameters with their JSON Schemas, handler). The same table drives request
 * parsing and validation (`handleRequest`) and the OpenAPI 3.1 document (`restApiDocument`), so the
 * document always says exactly what the server accepts.
 *
 * This file maps requests to answers from the world; it does not listen on a socket or inject faults
 * (server.ts does both).
 */
import {
  CABINS,
  CONTINENTS,
  CUISINES,
  DIETS,
  FLIGHT_DATES,
  SECTORS,
  TODAY,
  UNIT_CATEGORIES,
  UNIT_SYSTEMS,
  UNITS,
  celsiusToFahrenheit,
  daysBetween,
  greatCircleKm,
  isDate,
  weekday,
  type City,
  type RestWorld,
} from "./world.js";

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

interface ParamDef {
  name: string;
  in: "path" | "query";
  required?: boolean;
  description: string;
  schema: Record<string, unknown>;
}

type Args = Record<string, string | number | undefined>;

interface Endpoint {
  path: string;
  operationId: string;
  service: string;
  summary: string;
  params: ParamDef[];
  handle(world: RestWorld, args: Args): unknown;
}

const q = (name: string, description: string, schema: Record<string, unknown>, required = false): ParamDef => ({ name, in: "query", required, description, schema });
const p = (name: string, description: string, schema: Record<string, unknown>): ParamDef => ({ name, in: "path", required: true, description, schema });
const str = { type: "string", minLength: 1 };
const date = { type: "string", pattern: "^\\d{4}-\\d{2}-\\d{2}$" };
const enumOf = (values: readonly string[]) => ({ type: "string", enum: [...values] });

const cityParam = (name = "city") => q(name, "City name, e.g. Paris (see listCities).", str, true);
const unitsParam = q("units", "metric (°C, km/h; the default) or imperial (°F, mph).", enumOf(UNIT_SYSTEMS));

function needCity(world: RestWorld, name: unknown): City {
  const city = world.city(String(name));
  if (!city) throw new HttpError(404, `unknown city "${name}"; list the known cities with GET /geo/cities`);
  return city;
}
function needCurrency(world: RestWorld, code: unknown): string {
  const c = String(code).trim().toUpperCase();
  if (!world.usdRates.has(c)) throw new HttpError(404, `unknown currency "${code}"; known: ${[...world.usdRates.keys()].join(", ")}`);
  return c;
}
function needCompany(world: RestWorld, symbol: unknown) {
  const c = world.company(String(symbol));
  if (!c) throw new HttpError(404, `unknown stock symbol "${symbol}"; find symbols with GET /stocks/search`);
  return c;
}
function needRecipe(world: RestWorld, id: unknown) {
  const r = world.recipes.find((x) => x.id === Number(id));
  if (!r) throw new HttpError(404, `no recipe ${id}; find recipes with GET /recipes/search`);
  return r;
}
function needDate(value: unknown, name: string): string {
  const s = String(value);
  if (!isDate(s)) throw new HttpError(400, `"${name}" must be a real date YYYY-MM-DD, got "${s}"`);
  return s;
}
const imperial = (args: Args) => args.units === "imperial";
const kmhToMph = (k: number) => Math.round(k / 1.609344);

export const ENDPOINTS: Endpoint[] = [
  // weather
  {
    path: "/weather/current",
    operationId: "getCurrentWeather",
    service: "weather",
    summary: "Current weather in a city: temperature, condition, humidity, wind.",
    params: [cityParam(), unitsParam],
    handle(world, args) {
      const city = needCity(world, args.city);
      const w = world.currentWeather(city);
      return imperial(args)
        ? { city: city.name, temperature: celsiusToFahrenheit(w.temperature), temperature_unit: "F", condition: w.condition, humidity: w.humidity, wind: kmhToMph(w.wind_kph), wind_unit: "mph" }
        : { city: city.name, temperature: w.temperature, temperature_unit: "C", condition: w.condition, humidity: w.humidity, wind: w.wind_kph, wind_unit: "km/h" };
    },
  },
  {
    path: "/weather/forecast",
    operationId: "getWeatherForecast",
    service: "weather",
    summary: `Daily forecast for a city for the next 1 to 7 days; day 1 is today (${TODAY}).`,
    params: [cityParam(), q("days", "Number of days, 1 to 7 (default 3).", { type: "integer", minimum: 1, maximum: 7 }), unitsParam],
    handle(world, args) {
      const city = needCity(world, args.city);
      const days = world.forecast(city, Number(args.days ?? 3));
      const f = imperial(args);
      return {
        city: city.name,
        temperature_unit: f ? "F" : "C",
        days: days.map((d) => (f ? { ...d, high: celsiusToFahrenheit(d.high), low: celsiusToFahrenheit(d.low) } : d)),
      };
    },
  },
  {
    path: "/weather/air-quality",
    operationId: "getAirQuality",
    service: "weather",
    summary: "Air quality index (AQI) of a city and its category.",
    params: [cityParam()],
    handle: (world, args) => {
      const city = needCity(world, args.city);
      return { city: city.name, ...world.airQuality(city) };
    },
  },
  // currency
  {
    path: "/currency/currencies",
    operationId: "listCurrencies",
    service: "currency",
    summary: "The supported currencies (ISO codes and names).",
    params: [],
    handle: (world) => ({ currencies: [...world.currencyNames].map(([code, name]) => ({ code, name })) }),
  },
  {
    path: "/currency/rate",
    operationId: "getExchangeRate",
    service: "currency",
    summary: "Exchange rate: how many units of `to` one unit of `from` buys.",
    params: [q("from", "Currency code, e.g. USD.", str, true), q("to", "Currency code, e.g. EUR.", str, true)],
    handle(world, args) {
      const from = needCurrency(world, args.from);
      const to = needCurrency(world, args.to);
      return { from, to, rate: world.rate(from, to), as_of: TODAY };
    },
  },
  {
    path: "/currency/convert",
    operationId: "convertCurrency",
    service: "currency",
    summary: "Converts an amount between currencies at today's rate (result rounded to cents).",
    params: [q("from", "Currency code of the amount.", str, true), q("to", "Currency code to convert to.", str, true), q("amount", "The amount.", { type: "number", minimum: 0 }, true)],
    handle(world, args) {
      const from = needCurrency(world, args.from);
      const to = needCurrency(world, args.to);
      const amount = Number(args.amount);
      return { from, to, amount, rate: world.rate(from, to), result: world.convert(amount, from, to) };
    },
  },
  // calendar
  {
    path: "/calendar/events",
    operationId: "listEvents",
    service: "calendar",
    summary: "Events of the user's calendar, by day or date range and optionally by city.",
    params: [
      q("date", "Only events on this day (YYYY-MM-DD).", date),
      q("from", "Only events on or after this day.", date),
      q("to", "Only events on or before this day.", date),
      q("city", "Only events in this city.", str),
    ],
    handle(world, args) {
      const on = args.date === undefined ? undefined : needDate(args.date, "date");
      const from = args.from === undefined ? undefined : needDate(args.from, "from");
      const to = args.to === undefined ? undefined : needDate(args.to, "to");
      const city = args.city === undefined ? undefined : String(args.city).toLowerCase();
      const events = world.events.filter(
        (e) => (!on || e.date === on) && (!from || e.date >= from) && (!to || e.date <= to) && (!city || e.city.toLowerCase() === city),
      );
      return { count: events.length, events };
    },
  },
  {
    path: "/calendar/events/{event_id}",
    operationId: "getEvent",
    service: "calendar",
    summary: "One calendar event.",
    params: [p("event_id", "The event id.", { type: "integer", minimum: 1 })],
    handle(world, args) {
      const e = world.events.find((x) => x.id === Number(args.event_id));
      if (!e) throw new HttpError(404, `no event ${args.event_id}; list events with GET /calendar/events`);
      return e;
    },
  },
  {
    path: "/calendar/holidays",
    operationId: "listHolidays",
    service: "calendar",
    summary: "Public holidays of a country in a year.",
    params: [q("country", "Country code or name, e.g. FR or France.", str, true), q("year", "The year (2000 to 2100).", { type: "integer", minimum: 2000, maximum: 2100 }, true)],
    handle(world, args) {
      const c = world.country(String(args.country));
      if (!c) throw new HttpError(404, `unknown country "${args.country}"; list countries with GET /geo/countries`);
      const year = Number(args.year);
      return { country: c.code, year, holidays: world.holidays.get(c.code)!.map((h) => ({ date: `${year}-${h.date}`, name: h.name, weekday: weekday(`${year}-${h.date}`) })) };
    },
  },
  {
    path: "/calendar/weekday",
    operationId: "getWeekday",
    service: "calendar",
    summary: "The day of the week of a date.",
    params: [q("date", "The date, YYYY-MM-DD.", date, true)],
    handle: (_w, args) => {
      const d = needDate(args.date, "date");
      return { date: d, weekday: weekday(d) };
    },
  },
  {
    path: "/calendar/days-between",
    operationId: "daysBetween",
    service: "calendar",
    summary: "Number of days from one date to another (negative when `to` is earlier).",
    params: [q("from", "Start date.", date, true), q("to", "End date.", date, true)],
    handle: (_w, args) => {
      const from = needDate(args.from, "from");
      const to = needDate(args.to, "to");
      return { from, to, days: daysBetween(from, to) };
    },
  },
  // geography
  {
    path: "/geo/countries",
    operationId: "listCountries",
    service: "geography",
    summary: "Countries with capital, continent, currency and population; filter by continent or name.",
    params: [q("continent", "Only countries of this continent.", enumOf(CONTINENTS)), q("name", "Part of the country name, case-insensitive.", str)],
    handle(world, args) {
      const name = args.name === undefined ? undefined : String(args.name).toLowerCase();
      return { countries: world.countries.filter((c) => (!args.continent || c.continent === args.continent) && (!name || c.name.toLowerCase().includes(name))) };
    },
  },
  {
    path: "/geo/countries/{code}",
    operationId: "getCountry",
    service: "geography",
    summary: "One country by its two-letter code (or its full name).",
    params: [p("code", "ISO 3166 alpha-2 code, e.g. JP.", str)],
    handle(world, args) {
      const c = world.country(String(args.code));
      if (!c) throw new HttpError(404, `unknown country "${args.code}"; list countries with GET /geo/countries`);
      return { ...c, cities: world.cities.filter((x) => x.country === c.code).map((x) => x.name) };
    },
  },
  {
    path: "/geo/cities",
    operationId: "listCities",
    service: "geography",
    summary: "Cities with country, coordinates, population, airport and time zone.",
    params: [q("country", "Only cities of this country (code).", str), q("min_population", "Only cities with at least this population.", { type: "integer", minimum: 0 })],
    handle(world, args) {
      const country = args.country === undefined ? undefined : world.country(String(args.country))?.code ?? String(args.country).toUpperCase();
      const min = Number(args.min_population ?? 0);
      return { cities: world.cities.filter((c) => (!country || c.country === country) && c.population >= min) };
    },
  },
  {
    path: "/geo/cities/{name}",
    operationId: "getCity",
    service: "geography",
    summary: "One city by name.",
    params: [p("name", "The city name, e.g. Osaka.", str)],
    handle: (world, args) => needCity(world, args.name),
  },
  {
    path: "/geo/distance",
    operationId: "getDistance",
    service: "geography",
    summary: "Great-circle distance between two cities, in kilometres.",
    params: [cityParam("from"), cityParam("to")],
    handle(world, args) {
      const a = needCity(world, args.from);
      const b = needCity(world, args.to);
      return { from: a.name, to: b.name, km: greatCircleKm(a, b) };
    },
  },
  // stocks
  {
    path: "/stocks/search",
    operationId: "searchStocks",
    service: "stocks",
    summary: "Find listed companies by part of the name or symbol, or by sector.",
    params: [q("query", "Part of the company name or symbol, case-insensitive.", str), q("sector", "Only this sector.", enumOf(SECTORS))],
    handle(world, args) {
      const text = args.query === undefined ? undefined : String(args.query).toLowerCase();
      const found = world.companies.filter((c) => (!text || c.name.toLowerCase().includes(text) || c.symbol.toLowerCase().includes(text)) && (!args.sector || c.sector === args.sector));
      return { results: found.map((c) => ({ symbol: c.symbol, name: c.name, sector: c.sector })) };
    },
  },
  {
    path: "/stocks/{symbol}/quote",
    operationId: "getStockQuote",
    service: "stocks",
    summary: "Latest closing price of a stock, in USD.",
    params: [p("symbol", "The ticker symbol.", str)],
    handle: (world, args) => world.quote(needCompany(world, args.symbol)),
  },
  {
    path: "/stocks/{symbol}/history",
    operationId: "getStockHistory",
    service: "stocks",
    summary: "Daily closing prices (USD) for the last 1 to 30 days, oldest first.",
    params: [p("symbol", "The ticker symbol.", str), q("days", "Number of days (default 7).", { type: "integer", minimum: 1, maximum: 30 })],
    handle: (world, args) => {
      const c = needCompany(world, args.symbol);
      return { symbol: c.symbol, currency: "USD", closes: world.history(c, Number(args.days ?? 7)) };
    },
  },
  {
    path: "/stocks/{symbol}/profile",
    operationId: "getCompanyProfile",
    service: "stocks",
    summary: "Company profile: name, sector, headquarters country (code), CEO, founding year.",
    params: [p("symbol", "The ticker symbol.", str)],
    handle: (world, args) => {
      const { closes: _closes, ...profile } = needCompany(world, args.symbol);
      return profile;
    },
  },
  // flights
  {
    path: "/flights/airports",
    operationId: "listAirports",
    service: "flights",
    summary: "Airports (IATA codes) by city or country.",
    params: [q("city", "Only airports of this city.", str), q("country", "Only airports of this country (code).", str)],
    handle(world, args) {
      const city = args.city === undefined ? undefined : String(args.city).toLowerCase();
      const country = args.country === undefined ? undefined : String(args.country).toUpperCase();
      return { airports: world.airports.filter((a) => (!city || a.city.toLowerCase() === city) && (!country || a.country === country)) };
    },
  },
  {
    path: "/flights/search",
    operationId: "searchFlights",
    service: "flights",
    summary: `Direct flights between two airports on a day (${FLIGHT_DATES.from} to ${FLIGHT_DATES.to}), with fares in USD.`,
    params: [
      q("from", "Origin airport IATA code, e.g. CDG.", { type: "string", pattern: "^[A-Za-z]{3}$" }, true),
      q("to", "Destination airport IATA code.", { type: "string", pattern: "^[A-Za-z]{3}$" }, true),
      q("date", "Day of departure, YYYY-MM-DD.", date, true),
      q("cabin", "economy (default) or business.", enumOf(CABINS)),
      q("sort", "Order of results: price (default), departure or duration.", enumOf(["price", "departure", "duration"])),
    ],
    handle(world, args) {
      const from = String(args.from).toUpperCase();
      const to = String(args.to).toUpperCase();
      const day = needDate(args.date, "date");
      for (const code of [from, to]) if (!world.airports.some((a) => a.code === code)) throw new HttpError(404, `unknown airport "${code}"; list airports with GET /flights/airports`);
      if (day < FLIGHT_DATES.from || day > FLIGHT_DATES.to) throw new HttpError(400, `no schedule for ${day}; flights can be searched from ${FLIGHT_DATES.from} to ${FLIGHT_DATES.to}`);
      const cabin = (args.cabin ?? "economy") as (typeof CABINS)[number];
      const flights = world.flightsOn(from, to, day, cabin);
      const sort = args.sort ?? "price";
      flights.sort((a, b) =>
        sort === "departure" ? a.departs.localeCompare(b.departs) : sort === "duration" ? a.duration_minutes - b.duration_minutes : a.price - b.price || a.number.localeCompare(b.number),
      );
      return { count: flights.length, flights };
    },
  },
  {
    path: "/flights/{flight_number}",
    operationId: "getFlight",
    service: "flights",
    summary: "One flight by number, with its fare on a day.",
    params: [
      p("flight_number", "The flight number, e.g. SF123.", str),
      q("date", "Day of departure (default today).", date),
      q("cabin", "economy (default) or business.", enumOf(CABINS)),
    ],
    handle(world, args) {
      const f = world.schedule.find((x) => x.number === String(args.flight_number).toUpperCase());
      if (!f) throw new HttpError(404, `no flight ${args.flight_number}; search flights with GET /flights/search`);
      const day = args.date === undefined ? TODAY : needDate(args.date, "date");
      const cabin = (args.cabin ?? "economy") as (typeof CABINS)[number];
      const { baseFare: _base, ...flight } = f;
      return { ...flight, date: day, cabin, price: world.fare(f, day, cabin), currency: "USD" };
    },
  },
  // recipes
  {
    path: "/recipes/search",
    operationId: "searchRecipes",
    service: "recipes",
    summary: "Find recipes by name or ingredient, cuisine, diet or preparation time.",
    params: [
      q("query", "Part of the recipe name or an ingredient, case-insensitive.", str),
      q("cuisine", "Only this cuisine.", enumOf(CUISINES)),
      q("diet", "vegetarian or vegan (vegan recipes are vegetarian too); any for all.", enumOf(DIETS)),
      q("max_minutes", "Only recipes ready in at most this many minutes.", { type: "integer", minimum: 1 }),
    ],
    handle(world, args) {
      const text = args.query === undefined ? undefined : String(args.query).toLowerCase();
      const diet = args.diet ?? "any";
      const max = args.max_minutes === undefined ? Infinity : Number(args.max_minutes);
      const found = world.recipes.filter(
        (r) =>
          (!text || r.name.toLowerCase().includes(text) || r.ingredients.some((i) => i.name.includes(text))) &&
          (!args.cuisine || r.cuisine === args.cuisine) &&
          (diet === "any" || r.diet === diet || (diet === "vegetarian" && r.diet === "vegan")) &&
          r.minutes <= max,
      );
      return { results: found.map((r) => ({ id: r.id, name: r.name, cuisine: r.cuisine, diet: r.diet, minutes: r.minutes, servings: r.servings })) };
    },
  },
  {
    path: "/recipes/{recipe_id}",
    operationId: "getRecipe",
    service: "recipes",
    summary: "One recipe with its ingredients (grams for the whole recipe) and calories per serving.",
    params: [p("recipe_id", "The recipe id.", { type: "integer", minimum: 1 })],
    handle: (world, args) => needRecipe(world, args.recipe_id),
  },
  {
    path: "/recipes/{recipe_id}/nutrition",
    operationId: "getRecipeNutrition",
    service: "recipes",
    summary: "Total calories (kcal) and protein for a number of servings of a recipe.",
    params: [p("recipe_id", "The recipe id.", { type: "integer", minimum: 1 }), q("servings", "Number of servings (default 1).", { type: "integer", minimum: 1, maximum: 100 })],
    handle: (world, args) => world.recipeNutrition(needRecipe(world, args.recipe_id), Number(args.servings ?? 1)),
  },
  // units
  {
    path: "/units/units",
    operationId: "listUnits",
    service: "units",
    summary: "The units the converter knows, by category.",
    params: [q("category", "Only this category.", enumOf(UNIT_CATEGORIES))],
    handle: (world, args) => ({ units: world.unitList(args.category === undefined ? undefined : String(args.category)) }),
  },
  {
    path: "/units/convert",
    operationId: "convertUnits",
    service: "units",
    summary: "Converts a value between two units of the same category (result to 4 decimals).",
    params: [q("value", "The value to convert.", { type: "number" }, true), q("from", "Unit of the value.", enumOf(UNITS), true), q("to", "Unit to convert to.", enumOf(UNITS), true)],
    handle(world, args) {
      try {
        return { value: Number(args.value), from: args.from, to: args.to, result: world.convertUnits(Number(args.value), String(args.from), String(args.to)) };
      } catch (err) {
        throw new HttpError(400, (err as Error).message);
      }
    },
  },
];

const compiled = ENDPOINTS.map((e) => ({
  endpoint: e,
  pattern: new RegExp(`^${e.path.replace(/\{(\w+)\}/g, "(?<$1>[^/]+)")}$`),
}));

/** Parses and checks one parameter's raw text against its declared schema. */
function parseParam(def: ParamDef, raw: string): string | number {
  const s = def.schema;
  const where = def.in === "path" ? "path parameter" : "query parameter";
  if (s.type === "integer" || s.type === "number") {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(n) || (s.type === "integer" && !Number.isInteger(n))) {
      throw new HttpError(400, `${where} "${def.name}" must be ${s.type === "integer" ? "an integer" : "a number"}, got "${raw}"`);
    }
    if (typeof s.minimum === "number" && n < s.minimum) throw new HttpError(400, `${where} "${def.name}" must be at least ${s.minimum}, got ${n}`);
    if (typeof s.maximum === "number" && n > s.maximum) throw new HttpError(400, `${where} "${def.name}" must be at most ${s.maximum}, got ${n}`);
    return n;
  }
  if (Array.isArray(s.enum) && !s.enum.includes(raw)) throw new HttpError(400, `${where} "${def.name}" must be one of ${s.enum.join(", ")}; got "${raw}"`);
  if (typeof s.pattern === "string" && !new RegExp(s.pattern).test(raw)) throw new HttpError(400, `${where} "${def.name}" has the wrong format ("${raw}" does not match ${s.pattern})`);
  if (raw.trim() === "") throw new HttpError(400, `${where} "${def.name}" is empty`);
  return raw;
}

/** Answers one GET request (path and query) from the world, or throws an HttpError. */
export function handleRequest(world: RestWorld, pathname: string, query: URLSearchParams): unknown {
  for (const { endpoint, pattern } of compiled) {
    const m = pattern.exec(pathname);
    if (!m) continue;
    const args: Args = {};
    for (const def of endpoint.params) {
      let raw: string | null;
      if (def.in === "path") raw = decodeURIComponent(m.groups![def.name]!);
      else raw = query.get(def.name);
      if (raw === null) {
        if (def.required) throw new HttpError(400, `missing required query parameter "${def.name}" (${def.description})`);
        continue;
      }
      args[def.name] = parseParam(def, raw);
    }
    const known = new Set(endpoint.params.filter((d) => d.in === "query").map((d) => d.name));
    const extra = [...query.keys()].filter((k) => !known.has(k));
    if (extra.length) throw new HttpError(400, `unknown query parameter(s) ${extra.join(", ")}; ${endpoint.operationId} takes ${[...known].join(", ") || "none"}`);
    return endpoint.handle(world, args);
  }
  throw new HttpError(404, `no endpoint ${pathname}; see /openapi.json`);
}

/** The OpenAPI 3.1 document of the API served at `baseUrl`. */
export function restApiDocument(baseUrl: string): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  for (const e of ENDPOINTS) {
    paths[e.path] = {
      get: {
        operationId: e.operationId,
        tags: [e.service],
        summary: e.summary,
        parameters: e.params.map((d) => ({ name: d.name, in: d.in, required: d.required ?? false, description: d.description, schema: d.schema })),
        responses: {
          "200": { description: "OK", content: { "application/json": { schema: { type: "object" } } } },
          "400": { description: "A parameter is missing or malformed", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
          "404": { description: "Not found", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
          "503": { description: "The service is temporarily unavailable; try again", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
        },
      },
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "sinkflex everyday APIs",
      version: "1.0.0",
      description: "Weather, currency, calendar, geography, stocks, flights, recipes and unit conversion over one deterministic world.",
    },
    servers: [{ url: baseUrl }],
    tags: [...new Set(ENDPOINTS.map((e) => e.service))].map((name) => ({ name })),
    paths,
    components: { schemas: { Error: { type: "object", properties: { error: { type: "string" } }, required: ["error"] } } },
  };
}
