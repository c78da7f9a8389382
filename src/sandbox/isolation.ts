/**
 * How a sandboxed command is started: the isolation backends and the argv each one runs.
 *
 * - `bwrap` (bubblewrap): new user, mount, pid, network, ipc, uts and cgroup namespaces; the root is an
 *   empty read-only tmpfs with the host's `/usr` (and the `/bin`, `/lib*` links) bound read-only, a
 *   small generated `/etc`, a private `/tmp`, `/proc`, a minimal `/dev`, and the episode's tree bound
 *   read-write at its mount point. All capabilities are dropped.
 * - `unshare` (util-linux, needs root): the same layout built by a setup script in new mount, pid,
 *   network, ipc and uts namespaces, entered with `chroot` from a user namespace of the command's own.
 *
 * When the host runs as root, the command runs under a dedicated unprivileged uid (so the process
 * limit counts only the sandbox's own processes); the tree is chowned to it. Under both backends a user
 * namespace maps that uid (and gid) to 0 inside, so every sandbox sees itself and its tree's files as
 * root: owners that commands print (`ls -l`, `stat`, `tar`) do not depend on which sandbox ran them. Resource limits (memory,
 * processes, file size, no core files) are set by the shell inside with `ulimit` before the command.
 *
 * Nothing outlives the owner (the process that started the sandbox), even one killed by SIGKILL:
 * with `owner` set, the launcher runs under `setpriv --pdeathsig KILL` and first checks that its
 * parent is still the owner (closing the race where the owner dies before the signal is armed). The
 * namespace's first process keeps its credentials, so the parent-death signal that bwrap
 * (`--die-with-parent`) or unshare (`--kill-child`) gives it holds, and when it dies the kernel kills
 * every process of the pid namespace. Both bwrap and unshare arm that first process's signal only
 * once it is set up; an owner that dies before then is covered by the lifeline in sandbox.ts and by
 * `killStaleProcesses` (owner.ts).
 * This file builds argv only; spawning, time, output and disk limits are in sandbox.ts.
 */
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readlinkSync } from "node:fs";

export type IsolationKind = "bwrap" | "unshare";

/** Thrown when no isolation backend can run here; the message says what to install. */
export class SandboxUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxUnavailableError";
  }
}

const probeCache = new Map<IsolationKind, string | undefined>();

function which(program: string): string | undefined {
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(":")) {
    const p = `${dir}/${program}`;
    if (dir && existsSync(p)) return p;
  }
  return undefined;
}

/** Why `kind` cannot run here, or undefined when it can (checked once by running it). */
export function probeIsolation(kind: IsolationKind): string | undefined {
  if (probeCache.has(kind)) return probeCache.get(kind);
  let problem: string | undefined;
  try {
    if (kind === "bwrap") {
      if (!which("bwrap")) problem = "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)";
      else execFileSync("bwrap", ["--ro-bind", "/usr", "/usr", ...usrLinks(), "--unshare-all", "--die-with-parent", "/usr/bin/true"], { stdio: "pipe", timeout: 10_000 });
    } else {
      if (process.getuid?.() !== 0) problem = "unshare needs root";
      else if (!which("unshare") || !which("chroot")) problem = "unshare or chroot is not installed (util-linux, coreutils)";
      else execFileSync("unshare", ["--mount", "--pid", "--net", "--fork", "/usr/bin/true"], { stdio: "pipe", timeout: 10_000 });
    }
  } catch (err) {
    problem = `${kind} cannot create namespaces here: ${(err as Error).message.split("\n")[0]}`;
  }
  probeCache.set(kind, problem);
  return problem;
}

/** The first backend that works here (bwrap, then unshare), or a SandboxUnavailableError. */
export function detectIsolation(preferred: IsolationKind | "auto" = "auto"): IsolationKind {
  const order: IsolationKind[] = preferred === "auto" ? ["bwrap", "unshare"] : [preferred];
  const problems: string[] = [];
  for (const kind of order) {
    const problem = probeIsolation(kind);
    if (!problem) return kind;
    problems.push(problem);
  }
  throw new SandboxUnavailableError(
    `no sandbox is available: ${problems.join("; ")}. Install bubblewrap (apt-get install bubblewrap) or run as root with util-linux unshare; commands are never run unsandboxed.`,
  );
}

/** `/bin`, `/lib`, ... as the host has them: symlinks into /usr are recreated, real folders bound read-only. */
function usrLinks(): string[] {
  const out: string[] = [];
  for (const name of ["bin", "sbin", "lib", "lib32", "lib64", "libx32"]) {
    const p = `/${name}`;
    if (!existsSync(p)) continue;
    const st = lstatSync(p);
    if (st.isSymbolicLink()) out.push("--symlink", readlinkSync(p), p);
    else if (st.isDirectory()) out.push("--ro-bind", p, p);
  }
  return out;
}

export interface LaunchSpec {
  kind: IsolationKind;
  /** Host folder bound read-write at `mountPoint`. */
  tree: string;
  mountPoint: string;
  cwd: string;
  /** Host folder holding the generated `etc/` (bound read-only at /etc) and, for unshare, `root/`. */
  support: string;
  /** The unprivileged uid/gid to run as, when the host runs as root. */
  uid?: number;
  hostname: string;
  env: Record<string, string>;
  tmpBytes: number;
  /** The shell line run inside (limits, then the command). */
  inner: string[];
  /** The pid of the process that spawns the launcher: when it dies, the launcher is SIGKILLed (needs setpriv). */
  owner?: number;
}

/** The argv (program first) that runs `spec.inner` in the sandbox. */
export function launchArgv(spec: LaunchSpec): string[] {
  const argv = spec.kind === "bwrap" ? bwrapArgv(spec) : unshareArgv(spec);
  return spec.owner === undefined ? argv : diesWithOwner(spec.owner, argv);
}

/**
 * `argv` run so that it is SIGKILLed when `owner` dies: setpriv arms the parent-death signal, then a
 * shell checks that its parent is still `owner` (had the owner died before the signal was armed, the
 * parent would already be another process) and execs `argv`.
 */
function diesWithOwner(owner: number, argv: string[]): string[] {
  // An argv that is already `setpriv <credentials> -- program...` gets the signal in the same setpriv.
  const split = argv[0] === "setpriv" ? argv.indexOf("--") : -1;
  const credentials = split > 0 ? argv.slice(1, split) : [];
  const program = split > 0 ? argv.slice(split + 1) : argv;
  const guard = `[ "$PPID" = "$1" ] || { echo "sandbox: its owner process $1 is gone" >&2; exit 125; }; shift; exec "$@"`;
  return ["setpriv", "--pdeathsig", "KILL", ...credentials, "--", "/bin/sh", "-c", guard, "sandbox-owner", String(owner), ...program];
}

function bwrapArgv(spec: LaunchSpec): string[] {
  const argv = [
    "bwrap",
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--hostname",
    spec.hostname,
    "--ro-bind",
    "/usr",
    "/usr",
    ...usrLinks(),
    "--ro-bind",
    `${spec.support}/etc`,
    "/etc",
    ...(existsSync("/etc/alternatives") ? ["--ro-bind", "/etc/alternatives", "/etc/alternatives"] : []),
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--size",
    String(spec.tmpBytes),
    "--tmpfs",
    "/tmp",
    "--bind",
    spec.tree,
    spec.mountPoint,
    "--remount-ro",
    "/",
    "--chdir",
    spec.cwd,
    "--uid",
    "0",
    "--gid",
    "0",
    "--clearenv",
  ];
  for (const [k, v] of Object.entries(spec.env)) argv.push("--setenv", k, v);
  argv.push("--", ...spec.inner);
  if (spec.uid !== undefined) return ["setpriv", `--reuid=${spec.uid}`, `--regid=${spec.uid}`, "--clear-groups", "--", ...argv];
  return argv;
}

function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function unshareArgv(spec: LaunchSpec): string[] {
  const r = `${spec.support}/root`;
  const q = shQuote;
  const links = usrLinks();
  const linkLines: string[] = [];
  for (let i = 0; i < links.length; i += 3) {
    if (links[i] === "--symlink") linkLines.push(`ln -s ${q(links[i + 1]!)} ${q(r + links[i + 2]!)}`);
    else linkLines.push(`mkdir -p ${q(r + links[i + 2]!)} && mount --rbind ${q(links[i + 1]!)} ${q(r + links[i + 2]!)} && mount -o remount,bind,ro ${q(r + links[i + 2]!)}`);
  }
  const devs = ["null", "zero", "full", "random", "urandom", "tty"];
  // With a sandbox uid, the command enters a user namespace of its own that maps uid and gid 0 to that
  // host uid, as bwrap does: every sandbox sees itself, and the tree's files, as root (0), whatever its
  // host uid, so owners shown by `ls -l`, `stat` or `tar` are the same in any two sandboxes. All
  // capabilities are dropped (bounding set cleared, no new privileges), so that root has no more power
  // than the host uid. The host uid stays distinct per sandbox, for the process limit and the sweep.
  const enter =
    spec.uid !== undefined
      ? `setpriv --reuid=${spec.uid} --regid=${spec.uid} --clear-groups -- unshare --user --map-root-user -- chroot ${q(r)} /usr/bin/setpriv --no-new-privs --inh-caps=-all --bounding-set=-all --`
      : `chroot --userspec=${process.getuid?.() ?? 0}:${process.getgid?.() ?? 0} ${q(r)}`;
  const envArgs = Object.entries(spec.env).map(([k, v]) => q(`${k}=${v}`));
  const script = [
    "set -e",
    `mount --make-rprivate /`,
    `mount -t tmpfs -o size=4m,mode=755 sandboxroot ${q(r)}`,
    `mkdir -p ${q(r + "/usr")} ${q(r + "/etc")} ${q(r + "/tmp")} ${q(r + "/proc")} ${q(r + "/dev")} ${q(r + spec.mountPoint)}`,
    `mount --rbind /usr ${q(r + "/usr")} && mount -o remount,bind,ro ${q(r + "/usr")}`,
    ...linkLines,
    `mount --bind ${q(spec.support + "/etc")} ${q(r + "/etc")}`,
    ...(existsSync("/etc/alternatives") ? [`mount --bind /etc/alternatives ${q(r + "/etc/alternatives")}`] : []),
    `mount -o remount,bind,ro ${q(r + "/etc")}`,
    `mount -t proc -o nosuid,nodev,noexec proc ${q(r + "/proc")}`,
    `mount -t tmpfs -o size=${spec.tmpBytes},mode=1777 sandboxtmp ${q(r + "/tmp")}`,
    `mount -t tmpfs -o size=64k,mode=755 sandboxdev ${q(r + "/dev")}`,
    ...devs.map((d) => `touch ${q(`${r}/dev/${d}`)} && mount --bind /dev/${d} ${q(`${r}/dev/${d}`)}`),
    `mount --bind ${q(spec.tree)} ${q(r + spec.mountPoint)}`,
    `mount -o remount,bind,ro ${q(r)}`,
    `hostname ${q(spec.hostname)}`,
    `cd ${q(r + spec.cwd)}`,
    // Not exec: this shell stays the namespace's first process, as root, so the parent-death signal
    // of --kill-child holds (a change of uid, as setpriv or chroot --userspec makes, would clear it).
    "set +e",
    `${enter} /usr/bin/env -i ${envArgs.join(" ")} /bin/sh -c ${q(`cd ${q(spec.cwd)} && exec "$@"`)} sandbox ${spec.inner.map(q).join(" ")}`,
    "exit $?",
  ].join("\n");
  return ["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-c", script];
}
