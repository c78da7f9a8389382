/**
 * Recipes: what a particular run's training adds to the general algorithms of src/rl (the copy drill the
 * demo's SFT leads with). Nothing here is a training algorithm of its own; the
 * pipeline (src/pipeline) runs a recipe through its config.
 */
export { COPY_DRILL_SOURCE, copyDrillExamples, type CopyDrillOptions } from "./copy-drill.js";
