/**
 * Recipes: what a particular run's training adds to the general algorithms of src/rl (the demo's config
 * loader, and the copy drill its SFT leads with). Nothing here is a training algorithm of its own; the
 * pipeline (src/pipeline) runs a recipe through its config.
 */
export { COPY_DRILL_SOURCE, copyDrillExamples, type CopyDrillOptions } from "./copy-drill.js";
export { demoConfig, demoConfigFile, type DemoConfigOptions } from "./demo.js";
