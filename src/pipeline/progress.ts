/**
 * A progress line for long work: count, rate, ETA, and a few live figures. On a terminal it redraws one
 * line; elsewhere (CI, log files) it prints a line every few seconds. Writes to stderr so that stdout
 * stays clean for tables and JSON.
 */
/** Seconds of work before the line shows an ETA. */
const ETA_AFTER_SECONDS = 3;

export class Progress {
  private done = 0;
  private readonly start = Date.now();
  private lastPrint = 0;
  private readonly tty = process.stderr.isTTY === true;
  private extra = "";

  constructor(
    private readonly label: string,
    private total: number,
    private readonly unit = "it",
    private readonly quiet = false,
  ) {}

  tick(n = 1, extra?: string): void {
    this.done += n;
    if (extra !== undefined) this.extra = extra;
    const now = Date.now();
    if (this.done >= this.total || now - this.lastPrint >= (this.tty ? 100 : 5000)) {
      this.lastPrint = now;
      this.print();
    }
  }

  /** Changes the amount of work to do (a plan revised on the way). */
  retarget(total: number): void {
    this.total = total;
  }

  finish(extra?: string): void {
    if (extra !== undefined) this.extra = extra;
    this.print();
    if (this.tty && !this.quiet) process.stderr.write("\n");
  }

  private print(): void {
    if (this.quiet) return;
    const elapsed = (Date.now() - this.start) / 1000;
    const rate = elapsed > 0 ? this.done / elapsed : 0;
    // No ETA from the first moments: a rate read off a task or two (or a slow first step) is noise.
    const eta = rate > 0 && (elapsed >= ETA_AFTER_SECONDS || this.done >= this.total) ? Math.max(0, (this.total - this.done) / rate) : Number.NaN;
    const width = 24;
    const filled = this.total > 0 ? Math.round((width * Math.min(this.done, this.total)) / this.total) : 0;
    const bar = `[${"#".repeat(filled)}${".".repeat(width - filled)}]`;
    const line = `${this.label} ${bar} ${this.done}/${this.total} ${rate.toFixed(rate < 10 ? 2 : 0)} ${this.unit}/s elapsed ${formatSeconds(elapsed)} eta ${Number.isFinite(eta) ? formatSeconds(eta) : "?"}${this.extra ? `  ${this.extra}` : ""}`;
    if (this.tty) process.stderr.write(`\r\x1b[2K${line}`);
    else process.stderr.write(`${line}\n`);
  }
}

export function formatSeconds(s: number): string {
  if (s < 60) return `${s.toFixed(0)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(Math.round(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}
