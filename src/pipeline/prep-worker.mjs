// A data-preparation worker thread's entry point: loads the TypeScript sources through tsx (a worker
// does not inherit its parent's module loader), then serves jobs (prep-worker.ts).
import { register } from "tsx/esm/api";

register();
await import("./prep-worker.ts");
