/**
 * Gold trajectories of the ALFWorld games (`gt_traj.txt`): blocks of `Assistant:` turns whose
 * `<execute>` section holds calls like `goto("toaster 1")` or `take("bowl 1", "countertop 3")`,
 * each followed by an `Observation:` section with one line per call. This file turns them into
 * ALFWorld text commands ("go to toaster 1") paired with the recorded observations. It runs nothing.
 */

export interface GoldStep {
  /** The call as written, e.g. `take("bowl 1", "countertop 3")`. */
  call: string;
  /** The ALFWorld command, e.g. `take bowl 1 from countertop 3`. */
  command: string;
  /** The observation recorded for this call, when the file has one. */
  observation?: string;
}

/** The text command for one call of a gold trajectory. */
export function callToCommand(call: string): string {
  const m = /^\s*(\w+)\s*\((.*)\)\s*$/.exec(call);
  if (!m) throw new Error(`gt_traj: cannot read the call "${call}"; expected name("arg", ...)`);
  const name = m[1]!;
  const args = [...m[2]!.matchAll(/"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'/g)].map((x) => x[1] ?? x[2] ?? "");
  const need = (n: number) => {
    if (args.length !== n) throw new Error(`gt_traj: ${name}(...) takes ${n} argument(s), got ${args.length} in "${call}"`);
  };
  switch (name) {
    case "goto":
      need(1);
      return `go to ${args[0]}`;
    case "open":
    case "close":
    case "use":
    case "examine":
      need(1);
      return `${name} ${args[0]}`;
    case "take":
      need(2);
      return `take ${args[0]} from ${args[1]}`;
    case "put":
      need(2);
      return `put ${args[0]} in/on ${args[1]}`;
    case "clean":
    case "heat":
    case "cool":
    case "slice":
      need(2);
      return `${name} ${args[0]} with ${args[1]}`;
    case "look":
    case "inventory":
      need(0);
      return name;
    default:
      throw new Error(`gt_traj: unknown call "${name}" in "${call}"`);
  }
}

/** Parses a `gt_traj.txt` into steps (commands with their recorded observations). */
export function parseGoldTrajectory(text: string): GoldStep[] {
  const steps: GoldStep[] = [];
  const blocks = text.split(/^Assistant:\s*$/m).slice(1);
  for (const block of blocks) {
    const exec = /<execute>([\s\S]*?)<\/execute>/.exec(block);
    if (!exec) continue;
    const calls = exec[1]!
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "");
    const obsAt = block.indexOf("Observation:");
    const observations =
      obsAt < 0
        ? []
        : block
            .slice(obsAt + "Observation:".length)
            .split("\n")
            .map((l) => l.trim())
            .filter((l) => l !== "");
    calls.forEach((call, i) => steps.push({ call, command: callToCommand(call), observation: observations[i] }));
  }
  return steps;
}
