/**
 * The bundled environment suites. `registerBundledEnvs()` registers every suite's env ids with the
 * gym registry (once). Each suite folder exports its own `register...` function; add new suites here.
 */
import { registeredIds } from "../gym/index.js";
import { registerArith } from "./arith/index.js";
import { registerBash } from "./bash/index.js";
import { registerHousehold } from "./household/index.js";
import { registerSqlSuite } from "./sql/index.js";
import { registerCrmSuite } from "./crm/index.js";
import { registerTau } from "./tau/index.js";
import { registerRestApiSuite } from "./restapi/index.js";
import { registerCodeSuite } from "./code/index.js";

let registered = false;
let bundled: ReadonlySet<string> = new Set();

export function registerBundledEnvs(): void {
  if (registered) return;
  registered = true;
  const before = new Set(registeredIds());
  // Suites register here, one line each.
  registerArith();
  registerHousehold();
  registerBash();
  registerSqlSuite();
  registerCrmSuite();
  registerTau();
  registerRestApiSuite();
  registerCodeSuite();
  bundled = new Set(registeredIds().filter((id) => !before.has(id)));
}

/** The env ids `registerBundledEnvs` registered (empty before it runs): those a fresh thread can make too. */
export function bundledEnvIds(): ReadonlySet<string> {
  return bundled;
}
export { allSuites, changeArg, type Expert, type ExpertEpisode, expertFor, findSuiteForEnv, hasExpert, offByOne, registerSuite, type ReplayOptions, type ReplayReport, replayWithExpert, replayWrong, runExpertEpisode, type Suite, suiteForEnv, toOpenAIChatRecord, withChangedCall, type WrongReport } from "./suite.js";
export { conform, tauDomain } from "./tau/index.js";
