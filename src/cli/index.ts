/**
 * The command line's face: the program (`buildProgram`, `main`), the error a user can fix
 * (`UsageError`), and the command reference read off the program. Re-exports only.
 */
export { buildProgram, main } from "./main.js";
export { UsageError } from "./usage-error.js";
export { commandReference, REFERENCE_BEGIN, REFERENCE_END, withReference } from "./reference.js";
