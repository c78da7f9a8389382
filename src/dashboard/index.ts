/**
 * The run dashboard's public face: the read-only HTTP server over a runs folder, the static report of
 * one run, and a run's metrics as TensorBoard event files. It is not the command line
 * (cli/commands/dashboard.ts) and it never writes a run folder.
 */
export { createDashboardServer, exposureRefusal, flattenRecord, handleApi, HttpError, isLoopbackHost, metricsCsv, RawReply, readAllMetrics, readMetrics, startDashboard, type CheckpointInfo, type DashboardOptions, type MetricsPage } from "./server.js";
export { buildReport, inlineModule } from "./report.js";
export { crc32c, encodeEvent, exportTensorboard, maskedCrc32c, tfRecord, type TensorboardExport } from "./tensorboard.js";
