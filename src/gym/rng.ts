/**
 * The seeded random generator used by environments, spaces and task generators, kept importable from the
 * gym for compatibility. It is src/core/rng.ts's `Rng` (by default the mulberry32 generator every env has
 * always drawn from); this file only re-exports it.
 */
export { Rng, RNG_GENERATORS, type RngGenerator } from "../core/rng.js";
