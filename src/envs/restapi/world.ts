/**
 * The restapi world: the deterministic data behind the eight services (weather, currency, calendar,
 * geography, stocks, flights, recipes, units) and the functions that answer questions about it.
 *
 * Real places (countries, capitals, cities, airports, currencies, coordinates) carry generated values
 * (populations, weather, exchange rates, share prices, fares, recipes, events) drawn from `seed`: the
 * same seed gives the same world on every platform. Both the HTTP handlers (api.ts) and the task
 * generator (tasks.ts) read answers from here, so a task's answer is exactly what the API returns.
 * This file knows nothing of HTTP, tools or rewards.
 */
import { Rng } from "../../core/index.js";

/** The day the services treat as "today". */
export const TODAY = "2025-06-01";
/** Flights are scheduled on these days (inclusive). */
export const FLIGHT_DATES = { from: "2025-06-01", to: "2025-06-30" } as const;

export const CONTINENTS = ["Europe", "North America", "South America", "Asia", "Africa", "Oceania"] as const;
export const CONDITIONS = ["sunny", "partly cloudy", "cloudy", "rain", "thunderstorm", "windy", "fog"] as const;
export const SECTORS = ["technology", "energy", "health", "finance", "consumer", "industrial"] as const;
export const CUISINES = ["italian", "mexican", "indian", "japanese", "french", "american"] as const;
export const DIETS = ["any", "vegetarian", "vegan"] as const;
export const CABINS = ["economy", "business"] as const;
export const UNIT_SYSTEMS = ["metric", "imperial"] as const;

export interface Country {
  code: string;
  name: string;
  capital: string;
  continent: (typeof CONTINENTS)[number];
  currency: string;
  population: number;
}
export interface City {
  name: string;
  country: string;
  lat: number;
  lon: number;
  population: number;
  airport: string;
  timezone: string;
}
export interface Airport {
  code: string;
  name: string;
  city: string;
  country: string;
}

/** [code, name, capital, continent, currency, national day MM-DD, holiday name] */
const COUNTRY_TABLE: [string, string, string, Country["continent"], string, string, string][] = [
  ["FR", "France", "Paris", "Europe", "EUR", "07-14", "Bastille Day"],
  ["DE", "Germany", "Berlin", "Europe", "EUR", "10-03", "German Unity Day"],
  ["ES", "Spain", "Madrid", "Europe", "EUR", "10-12", "National Day of Spain"],
  ["IT", "Italy", "Rome", "Europe", "EUR", "06-02", "Republic Day"],
  ["GB", "United Kingdom", "London", "Europe", "GBP", "12-26", "Boxing Day"],
  ["CH", "Switzerland", "Bern", "Europe", "CHF", "08-01", "Swiss National Day"],
  ["US", "United States", "Washington", "North America", "USD", "07-04", "Independence Day"],
  ["CA", "Canada", "Ottawa", "North America", "CAD", "07-01", "Canada Day"],
  ["BR", "Brazil", "Brasilia", "South America", "BRL", "09-07", "Independence Day"],
  ["JP", "Japan", "Tokyo", "Asia", "JPY", "02-11", "National Foundation Day"],
  ["IN", "India", "New Delhi", "Asia", "INR", "01-26", "Republic Day"],
  ["ZA", "South Africa", "Pretoria", "Africa", "ZAR", "04-27", "Freedom Day"],
  ["AU", "Australia", "Canberra", "Oceania", "AUD", "01-26", "Australia Day"],
];

/** [name, country, lat, lon, airport code, airport name, timezone] */
const CITY_TABLE: [string, string, number, number, string, string, string][] = [
  ["Paris", "FR", 48.857, 2.352, "CDG", "Charles de Gaulle", "Europe/Paris"],
  ["Lyon", "FR", 45.764, 4.836, "LYS", "Lyon-Saint Exupery", "Europe/Paris"],
  ["Marseille", "FR", 43.297, 5.37, "MRS", "Marseille Provence", "Europe/Paris"],
  ["Berlin", "DE", 52.52, 13.405, "BER", "Berlin Brandenburg", "Europe/Berlin"],
  ["Munich", "DE", 48.137, 11.576, "MUC", "Munich", "Europe/Berlin"],
  ["Hamburg", "DE", 53.551, 9.994, "HAM", "Hamburg", "Europe/Berlin"],
  ["Madrid", "ES", 40.417, -3.704, "MAD", "Madrid-Barajas", "Europe/Madrid"],
  ["Barcelona", "ES", 41.385, 2.173, "BCN", "Barcelona-El Prat", "Europe/Madrid"],
  ["Rome", "IT", 41.903, 12.496, "FCO", "Rome Fiumicino", "Europe/Rome"],
  ["Milan", "IT", 45.464, 9.19, "MXP", "Milan Malpensa", "Europe/Rome"],
  ["London", "GB", 51.507, -0.128, "LHR", "London Heathrow", "Europe/London"],
  ["Manchester", "GB", 53.481, -2.243, "MAN", "Manchester", "Europe/London"],
  ["Bern", "CH", 46.948, 7.447, "BRN", "Bern", "Europe/Zurich"],
  ["Zurich", "CH", 47.377, 8.541, "ZRH", "Zurich", "Europe/Zurich"],
  ["Washington", "US", 38.907, -77.037, "IAD", "Washington Dulles", "America/New_York"],
  ["New York", "US", 40.713, -74.006, "JFK", "John F. Kennedy", "America/New_York"],
  ["Chicago", "US", 41.878, -87.63, "ORD", "Chicago O'Hare", "America/Chicago"],
  ["Ottawa", "CA", 45.421, -75.697, "YOW", "Ottawa Macdonald-Cartier", "America/Toronto"],
  ["Toronto", "CA", 43.653, -79.383, "YYZ", "Toronto Pearson", "America/Toronto"],
  ["Brasilia", "BR", -15.794, -47.882, "BSB", "Brasilia", "America/Sao_Paulo"],
  ["Sao Paulo", "BR", -23.551, -46.633, "GRU", "Sao Paulo Guarulhos", "America/Sao_Paulo"],
  ["Tokyo", "JP", 35.676, 139.65, "HND", "Tokyo Haneda", "Asia/Tokyo"],
  ["Osaka", "JP", 34.694, 135.502, "KIX", "Kansai", "Asia/Tokyo"],
  ["New Delhi", "IN", 28.614, 77.209, "DEL", "Indira Gandhi", "Asia/Kolkata"],
  ["Mumbai", "IN", 19.076, 72.878, "BOM", "Chhatrapati Shivaji Maharaj", "Asia/Kolkata"],
  ["Pretoria", "ZA", -25.747, 28.229, "PRY", "Wonderboom", "Africa/Johannesburg"],
  ["Cape Town", "ZA", -33.925, 18.424, "CPT", "Cape Town", "Africa/Johannesburg"],
  ["Canberra", "AU", -35.281, 149.13, "CBR", "Canberra", "Australia/Sydney"],
  ["Sydney", "AU", -33.869, 151.209, "SYD", "Sydney Kingsford Smith", "Australia/Sydney"],
];

/** How many units of each currency one US dollar buys, before the seed's drift of up to ±5%. */
const USD_RATES: Record<string, [string, number]> = {
  USD: ["US Dollar", 1],
  EUR: ["Euro", 0.92],
  GBP: ["Pound Sterling", 0.79],
  CHF: ["Swiss Franc", 0.9],
  CAD: ["Canadian Dollar", 1.36],
  BRL: ["Brazilian Real", 5.1],
  JPY: ["Japanese Yen", 151],
  INR: ["Indian Rupee", 83.2],
  ZAR: ["South African Rand", 18.6],
  AUD: ["Australian Dollar", 1.52],
};

/** [unit, category, factor to the category's base unit] (temperature is handled apart). */
const UNIT_TABLE: [string, string, string, number][] = [
  ["m", "length", "metre", 1],
  ["km", "length", "kilometre", 1000],
  ["cm", "length", "centimetre", 0.01],
  ["mi", "length", "mile", 1609.344],
  ["ft", "length", "foot", 0.3048],
  ["in", "length", "inch", 0.0254],
  ["kg", "mass", "kilogram", 1],
  ["g", "mass", "gram", 0.001],
  ["lb", "mass", "pound", 0.45359237],
  ["oz", "mass", "ounce", 0.028349523125],
  ["l", "volume", "litre", 1],
  ["ml", "volume", "millilitre", 0.001],
  ["gal", "volume", "US gallon", 3.785411784],
  ["cup", "volume", "US cup", 0.2365882365],
  ["kcal", "energy", "kilocalorie", 4.184],
  ["kj", "energy", "kilojoule", 1],
  ["c", "temperature", "degree Celsius", 1],
  ["f", "temperature", "degree Fahrenheit", 1],
  ["k", "temperature", "kelvin", 1],
];
export const UNITS = UNIT_TABLE.map((u) => u[0]);
export const UNIT_CATEGORIES = [...new Set(UNIT_TABLE.map((u) => u[1]))];

const COMPANY_WORDS = ["Acme", "Borealis", "Cobalt", "Dynamo", "Evergreen", "Falcon", "Granite", "Helix", "Ion", "Juniper", "Keystone", "Lumen", "Meridian", "Nimbus", "Orion", "Pioneer"];
const COMPANY_SUFFIX = ["Systems", "Energy", "Health", "Capital", "Foods", "Industries", "Labs", "Motors"];
const SECTOR_OF_SUFFIX: Record<string, (typeof SECTORS)[number]> = {
  Systems: "technology",
  Labs: "technology",
  Energy: "energy",
  Health: "health",
  Capital: "finance",
  Foods: "consumer",
  Motors: "industrial",
  Industries: "industrial",
};
const FIRST = ["Ana", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kira", "Luis", "Maya", "Nils", "Omar", "Priya"];
const LAST = ["Adams", "Bauer", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hughes", "Ito", "Jensen", "Khan", "Lopez", "Moreau", "Novak", "Okafor", "Patel"];
const AIRLINES: [string, string][] = [
  ["SF", "Skyflex"],
  ["NA", "Northair"],
  ["BL", "Bluewing"],
  ["MR", "Meridian Air"],
];

const DISHES: [string, (typeof CUISINES)[number], (typeof DIETS)[number], string[]][] = [
  ["Margherita Pizza", "italian", "vegetarian", ["flour", "tomato", "mozzarella", "basil"]],
  ["Spaghetti Carbonara", "italian", "any", ["spaghetti", "egg", "pancetta", "parmesan"]],
  ["Mushroom Risotto", "italian", "vegetarian", ["rice", "mushroom", "parmesan", "onion"]],
  ["Chicken Tacos", "mexican", "any", ["tortilla", "chicken", "salsa", "onion"]],
  ["Black Bean Burrito", "mexican", "vegan", ["tortilla", "black beans", "rice", "salsa"]],
  ["Guacamole", "mexican", "vegan", ["avocado", "lime", "onion", "tomato"]],
  ["Chana Masala", "indian", "vegan", ["chickpeas", "tomato", "onion", "garam masala"]],
  ["Butter Chicken", "indian", "any", ["chicken", "butter", "tomato", "cream"]],
  ["Palak Paneer", "indian", "vegetarian", ["spinach", "paneer", "onion", "cream"]],
  ["Miso Soup", "japanese", "vegan", ["miso", "tofu", "seaweed", "spring onion"]],
  ["Chicken Teriyaki", "japanese", "any", ["chicken", "soy sauce", "rice", "ginger"]],
  ["Vegetable Tempura", "japanese", "vegetarian", ["flour", "egg", "zucchini", "sweet potato"]],
  ["Ratatouille", "french", "vegan", ["eggplant", "zucchini", "tomato", "pepper"]],
  ["Quiche Lorraine", "french", "any", ["flour", "egg", "bacon", "cream"]],
  ["Onion Soup", "french", "vegetarian", ["onion", "butter", "bread", "gruyere"]],
  ["Cheeseburger", "american", "any", ["beef", "bun", "cheddar", "lettuce"]],
  ["Pancakes", "american", "vegetarian", ["flour", "egg", "milk", "butter"]],
  ["Veggie Chili", "american", "vegan", ["kidney beans", "tomato", "pepper", "onion"]],
];

const EVENT_TITLES = ["Team standup", "Budget review", "Client call", "Design workshop", "Quarterly planning", "Dentist", "Lunch with Sam", "Product demo", "Board meeting", "Yoga class"];
const WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

export interface Company {
  symbol: string;
  name: string;
  sector: (typeof SECTORS)[number];
  country: string;
  ceo: string;
  founded: number;
  /** Closing prices in USD, oldest first, the last one on the day before TODAY. */
  closes: number[];
}
export interface Recipe {
  id: number;
  name: string;
  cuisine: (typeof CUISINES)[number];
  diet: (typeof DIETS)[number];
  minutes: number;
  servings: number;
  calories_per_serving: number;
  protein_g_per_serving: number;
  ingredients: { name: string; grams: number }[];
}
export interface CalendarEvent {
  id: number;
  title: string;
  date: string;
  start: string;
  end: string;
  city: string;
  attendees: number;
}
export interface Holiday {
  date: string;
  name: string;
}
export interface ScheduledFlight {
  number: string;
  airline: string;
  from: string;
  to: string;
  departs: string;
  duration_minutes: number;
  /** Economy fare on a day of average demand, USD. */
  baseFare: number;
}

export const round = (x: number, digits: number): number => {
  const f = 10 ** digits;
  return Math.round((x + Number.EPSILON * Math.sign(x)) * f) / f;
};

/** A 32-bit FNV-1a hash of a string, to derive independent per-key generators from the world seed. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function addDays(date: string, days: number): string {
  const d = new Date(`${date}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + days);
  return d.toISOString().slice(0, 10);
}
export function daysBetween(from: string, to: string): number {
  return Math.round((Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / 86_400_000);
}
export function weekday(date: string): string {
  return WEEKDAYS[new Date(`${date}T00:00:00Z`).getUTCDay()]!;
}
export const isDate = (s: string): boolean => /^\d{4}-\d{2}-\d{2}$/.test(s) && !Number.isNaN(Date.parse(`${s}T00:00:00Z`)) && new Date(`${s}T00:00:00Z`).toISOString().startsWith(s);

/** Great-circle distance in km (haversine, Earth radius 6371 km), to 0.1 km. */
export function greatCircleKm(a: { lat: number; lon: number }, b: { lat: number; lon: number }): number {
  const rad = Math.PI / 180;
  const dLat = (b.lat - a.lat) * rad;
  const dLon = (b.lon - a.lon) * rad;
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * rad) * Math.cos(b.lat * rad) * Math.sin(dLon / 2) ** 2;
  return round(2 * 6371 * Math.asin(Math.sqrt(h)), 1);
}

export const celsiusToFahrenheit = (c: number): number => round((c * 9) / 5 + 32, 1);

export class RestWorld {
  readonly countries: Country[];
  readonly cities: City[];
  readonly airports: Airport[];
  readonly holidays: Map<string, Holiday[]>;
  /** Units of each currency per US dollar. */
  readonly usdRates: Map<string, number>;
  readonly currencyNames: Map<string, string>;
  readonly companies: Company[];
  readonly recipes: Recipe[];
  readonly events: CalendarEvent[];
  readonly schedule: ScheduledFlight[];

  constructor(readonly seed: number) {
    const rng = new Rng(seed ^ 0x5eed);
    this.countries = COUNTRY_TABLE.map(([code, name, capital, continent, currency]) => ({
      code,
      name,
      capital,
      continent,
      currency,
      population: rng.range(5_000, 400_000) * 1000,
    }));
    this.cities = CITY_TABLE.map(([name, country, lat, lon, airport, , timezone]) => ({
      name,
      country,
      lat,
      lon,
      population: rng.range(300, 14_000) * 1000,
      airport,
      timezone,
    }));
    this.airports = CITY_TABLE.map(([city, country, , , code, name]) => ({ code, name: `${name} Airport`, city, country }));
    this.holidays = new Map(
      COUNTRY_TABLE.map(([code, , , , , day, holiday]) => [
        code,
        [
          { date: "01-01", name: "New Year's Day" },
          { date: day, name: holiday },
          { date: "12-25", name: "Christmas Day" },
        ]
          .filter((h, i, all) => all.findIndex((x) => x.date === h.date) === i)
          .sort((a, b) => a.date.localeCompare(b.date)),
      ]),
    );
    this.usdRates = new Map(Object.entries(USD_RATES).map(([code, [, base]]) => [code, code === "USD" ? 1 : round(base * (0.95 + rng.next() * 0.1), 4)]));
    this.currencyNames = new Map(Object.entries(USD_RATES).map(([code, [name]]) => [code, name]));

    const names = rng.shuffle([...COMPANY_WORDS]);
    this.companies = names.slice(0, 14).map((word, i) => {
      const suffix = COMPANY_SUFFIX[i % COMPANY_SUFFIX.length]!;
      const start = rng.range(20, 600) + rng.range(0, 99) / 100;
      const closes: number[] = [];
      let price = start;
      for (let d = 0; d < 30; d++) {
        price = Math.max(1, price * (1 + (rng.next() - 0.5) * 0.06));
        closes.push(round(price, 2));
      }
      return {
        symbol: (word.slice(0, 3) + suffix[0]).toUpperCase(),
        name: `${word} ${suffix}`,
        sector: SECTOR_OF_SUFFIX[suffix]!,
        country: rng.pick(this.countries).code,
        ceo: `${rng.pick(FIRST)} ${rng.pick(LAST)}`,
        founded: rng.range(1950, 2018),
        closes,
      };
    });

    this.recipes = DISHES.map(([name, cuisine, diet, ingredients], i) => {
      const calories = rng.range(18, 90) * 10;
      return {
        id: 101 + i,
        name,
        cuisine,
        diet,
        minutes: rng.range(2, 18) * 5,
        servings: rng.range(2, 6),
        calories_per_serving: calories,
        protein_g_per_serving: rng.range(3, 45),
        ingredients: ingredients.map((n) => ({ name: n, grams: rng.range(2, 50) * 10 })),
      };
    });

    this.events = [];
    for (let i = 0; i < 40; i++) {
      const hour = rng.range(8, 17);
      const length = rng.pick([30, 60, 90]);
      const end = hour * 60 + length;
      const hhmm = (m: number) => `${String(Math.floor(m / 60)).padStart(2, "0")}:${String(m % 60).padStart(2, "0")}`;
      this.events.push({
        id: 1 + i,
        title: rng.pick(EVENT_TITLES),
        date: addDays(TODAY, rng.range(0, 29)),
        start: hhmm(hour * 60),
        end: hhmm(end),
        city: rng.pick(this.cities).name,
        attendees: rng.range(1, 12),
      });
    }
    this.events.sort((a, b) => a.date.localeCompare(b.date) || a.start.localeCompare(b.start) || a.id - b.id);

    this.schedule = [];
    let flightNo = 100;
    for (const from of this.cities) {
      for (const to of this.cities) {
        if (from === to) continue;
        const km = greatCircleKm(from, to);
        const count = 1 + rng.int(3);
        for (let k = 0; k < count; k++) {
          const [code, airline] = rng.pick(AIRLINES);
          const departMinutes = rng.range(12, 44) * 30;
          this.schedule.push({
            number: `${code}${flightNo++}`,
            airline,
            from: from.airport,
            to: to.airport,
            departs: `${String(Math.floor(departMinutes / 60)).padStart(2, "0")}:${String(departMinutes % 60).padStart(2, "0")}`,
            duration_minutes: Math.round((km / 800) * 60 + 40 + rng.range(0, 30)),
            baseFare: round(60 + km * 0.07 * (0.8 + rng.next() * 0.5), 2),
          });
        }
      }
    }
  }

  // --- geography ---
  country(codeOrName: string): Country | undefined {
    const key = codeOrName.trim().toLowerCase();
    return this.countries.find((c) => c.code.toLowerCase() === key || c.name.toLowerCase() === key);
  }
  city(name: string): City | undefined {
    const key = name.trim().toLowerCase();
    return this.cities.find((c) => c.name.toLowerCase() === key);
  }

  // --- weather ---
  /** The current weather in a city (metric: °C, km/h). */
  currentWeather(city: City): { temperature: number; condition: string; humidity: number; wind_kph: number } {
    const r = new Rng(hash(`weather:${this.seed}:${city.name}`));
    const base = city.lat < 0 ? 14 : 24 - Math.abs(city.lat - 30) * 0.25;
    return {
      temperature: round(base + (r.next() - 0.5) * 12, 1),
      condition: r.pick(CONDITIONS),
      humidity: r.range(20, 95),
      wind_kph: r.range(0, 45),
    };
  }
  /** The next `days` days' forecast for a city, day 1 = TODAY (metric). */
  forecast(city: City, days: number): { date: string; high: number; low: number; condition: string; precipitation_mm: number }[] {
    const now = this.currentWeather(city);
    const r = new Rng(hash(`forecast:${this.seed}:${city.name}`));
    const out = [];
    for (let d = 0; d < days; d++) {
      const high = round(now.temperature + 2 + (r.next() - 0.3) * 6, 1);
      const condition = r.pick(CONDITIONS);
      out.push({
        date: addDays(TODAY, d),
        high,
        low: round(high - 4 - r.next() * 6, 1),
        condition,
        precipitation_mm: condition === "rain" || condition === "thunderstorm" ? round(1 + r.next() * 20, 1) : 0,
      });
    }
    return out;
  }
  airQuality(city: City): { aqi: number; category: string; dominant_pollutant: string } {
    const r = new Rng(hash(`aqi:${this.seed}:${city.name}`));
    const aqi = r.range(12, 180);
    const category = aqi <= 50 ? "good" : aqi <= 100 ? "moderate" : aqi <= 150 ? "unhealthy for sensitive groups" : "unhealthy";
    return { aqi, category, dominant_pollutant: r.pick(["pm2.5", "pm10", "ozone", "no2"]) };
  }

  // --- currency ---
  /** Units of `to` per unit of `from`, to 6 decimals. */
  rate(from: string, to: string): number {
    return round(this.usdRates.get(to)! / this.usdRates.get(from)!, 6);
  }
  /** `amount` of `from` in `to`, to 2 decimals, at `rate(from, to)`. */
  convert(amount: number, from: string, to: string): number {
    return round(amount * this.rate(from, to), 2);
  }

  // --- stocks ---
  company(symbol: string): Company | undefined {
    return this.companies.find((c) => c.symbol === symbol.trim().toUpperCase());
  }
  quote(c: Company): { symbol: string; price: number; currency: string; change_pct: number; as_of: string } {
    const last = c.closes[c.closes.length - 1]!;
    const prev = c.closes[c.closes.length - 2]!;
    return { symbol: c.symbol, price: last, currency: "USD", change_pct: round(((last - prev) / prev) * 100, 2), as_of: addDays(TODAY, -1) };
  }
  history(c: Company, days: number): { date: string; close: number }[] {
    const closes = c.closes.slice(-days);
    return closes.map((close, i) => ({ date: addDays(TODAY, -(closes.length - i)), close }));
  }

  // --- flights ---
  airportsOf(city: City): Airport[] {
    return this.airports.filter((a) => a.city === city.name);
  }
  /** The fare of a scheduled flight on a date and cabin, USD. */
  fare(f: ScheduledFlight, date: string, cabin: (typeof CABINS)[number]): number {
    const r = new Rng(hash(`fare:${this.seed}:${f.number}:${date}`));
    const demand = 0.85 + r.next() * 0.4;
    return round(f.baseFare * demand * (cabin === "business" ? 3.2 : 1), 2);
  }
  flightsOn(from: string, to: string, date: string, cabin: (typeof CABINS)[number]) {
    return this.schedule
      .filter((f) => f.from === from && f.to === to)
      .map((f) => ({ number: f.number, airline: f.airline, from: f.from, to: f.to, date, departs: f.departs, duration_minutes: f.duration_minutes, cabin, price: this.fare(f, date, cabin), currency: "USD" }));
  }

  // --- recipes ---
  recipeNutrition(r: Recipe, servings: number): { recipe_id: number; servings: number; calories: number; protein_g: number } {
    return { recipe_id: r.id, servings, calories: r.calories_per_serving * servings, protein_g: r.protein_g_per_serving * servings };
  }

  // --- units ---
  convertUnits(value: number, from: string, to: string): number {
    const a = UNIT_TABLE.find((u) => u[0] === from)!;
    const b = UNIT_TABLE.find((u) => u[0] === to)!;
    if (a[1] !== b[1]) throw new RangeError(`cannot convert ${a[2]} (${a[1]}) to ${b[2]} (${b[1]})`);
    if (a[1] === "temperature") {
      const kelvin = from === "c" ? value + 273.15 : from === "f" ? ((value - 32) * 5) / 9 + 273.15 : value;
      const out = to === "c" ? kelvin - 273.15 : to === "f" ? ((kelvin - 273.15) * 9) / 5 + 32 : kelvin;
      return round(out, 4);
    }
    return round((value * a[3]) / b[3], 4);
  }
  unitList(category?: string): { unit: string; category: string; name: string }[] {
    return UNIT_TABLE.filter((u) => !category || u[1] === category).map(([unit, cat, name]) => ({ unit, category: cat, name }));
  }
}
