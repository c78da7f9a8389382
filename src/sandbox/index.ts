/**
 * The sandbox module's public API: a sandboxed shell over one folder (`Sandbox`), the isolation
 * backends (`detectIsolation`), file trees (`buildTree`, `snapshotTree`, `diffSnapshots`,
 * `treeDiskUsage`) and the removal of what processes that died left behind (`removeStaleFolders`,
 * `killStaleProcesses`).
 * Used by the bash and code suites; it knows no environment.
 */
export { DEFAULT_LIMITS, Sandbox, type ExecResult, type SandboxLimitKind, type SandboxLimits, type SandboxOptions } from "./sandbox.js";
export { detectIsolation, probeIsolation, SandboxUnavailableError, type IsolationKind } from "./isolation.js";
export { buildTree, diffSnapshots, makeTreeDir, removeTree, snapshotTree, treeDiskUsage, type SnapshotEntry, type TreeNode } from "./tree.js";
export { killStaleProcesses, ownerMark, removeStaleFolders } from "./owner.js";
