/**
 * The run dashboard's public face: the read-only HTTP server over a runs folder and the static report
 * of one run. It is not the command line (cli/commands/dashboard.ts) and it never writes a run folder.
 */
export { createDashboardServer, exposureRefusal, handleApi, HttpError, isLoopbackHost, metricsCsv, RawReply, readMetrics, startDashboard, type CheckpointInfo, type DashboardOptions, type MetricsPage } from "./server.js";
export { buildReport, inlineModule } from "./report.js";
