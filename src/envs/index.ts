/**
 * The bundled environment suites. `registerBundledEnvs()` registers every suite's env ids with the
 * gym registry (once). Each suite folder exports its own `register...` function; add new suites here.
 */
import { registerArith } from "./arith/index.js";
import { registerBash } from "./bash/index.js";
import { registerHousehold } from "./household/index.js";
import { registerSqlSuite } from "./sql/index.js";
import { registerCrmSuite } from "./crm/index.js";
import { registerTau } from "./tau/index.js";
import { registerRestApiSuite } from "./restapi/index.js";
import { registerCodeSuite } from "./code/index.js";

let registered = false;

export function registerBundledEnvs(): void {
  if (registered) return;
  registered = true;
  // Suites register here, one line each.
  registerArith();
  registerHousehold();
  registerBash();
  registerSqlSuite();
  registerCrmSuite();
  registerTau();
  registerRestApiSuite();
  registerCodeSuite();
}
