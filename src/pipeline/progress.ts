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

/**
 * Seconds as "42s", "3m05s" or "1h07m". The whole value is rounded to the unit shown first, so that a
 * part never reads 60 (239.6 s is "4m00s", not "3m60s"; 3599.7 s is "1h00m").
 */
export function formatSeconds(s: number): string {
  const secs = Math.round(s);
  if (secs < 60) return `${secs}s`;
  if (secs < 3600) return `${Math.floor(secs / 60)}m${String(secs % 60).padStart(2, "0")}s`;
  const mins = Math.round(s / 60);
  return `${Math.floor(mins / 60)}h${String(mins % 60).padStart(2, "0")}m`;
}
