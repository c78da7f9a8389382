import { afterEach, describe, expect, it, vi } from "vitest";
import { formatSeconds, Progress } from "../../src/pipeline/progress.js";

/** A clock far from 0, as a real one is (the first tick prints at once). */
const T0 = 1_700_000_000_000;

/** The lines a Progress writes to stderr while `run` runs. */
function linesOf(run: () => void): string[] {
  const lines: string[] = [];
  const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk).replace(/^\r\x1b\[2K/, "").trimEnd());
    return true;
  });
  try {
    run();
  } finally {
    spy.mockRestore();
  }
  return lines.filter(Boolean);
}

describe("Progress", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("shows counts and rate at once, and an ETA only after a few seconds of work", () => {
    vi.useFakeTimers({ now: T0 });
    const progress = new Progress("eval", 100, "tasks");
    // The first tick, a fraction of a second in: a rate from one task would give a wild ETA.
    vi.setSystemTime(T0 + 200);
    const first = linesOf(() => progress.tick(1, "arith"));
    expect(first[0]).toMatch(/^eval \[\.+\] 1\/100 5\.00 tasks\/s elapsed 0s eta \? {2}arith$/);
    vi.setSystemTime(T0 + 10_000);
    const later = linesOf(() => progress.tick(49));
    // 50 tasks in 10 s: 5 a second, 50 left.
    expect(later[0]).toMatch(/50\/100 5\.00 tasks\/s elapsed 10s eta 10s {2}arith$/);
    const last = linesOf(() => progress.finish());
    expect(last[0]).toMatch(/50\/100/);
  });

  it("shows an ETA of 0 when the work is done, however quick", () => {
    vi.useFakeTimers({ now: T0 });
    const progress = new Progress("sft", 4, "steps");
    vi.setSystemTime(T0 + 500);
    const lines = linesOf(() => progress.tick(4));
    expect(lines[0]).toMatch(/4\/4 8\.00 steps\/s elapsed 1s eta 0s$/);
  });
});

describe("formatSeconds", () => {
  it("rounds the whole time, so that no part reads 60 (239.6 s is 4m00s, not 3m60s)", () => {
    expect(formatSeconds(239.6)).toBe("4m00s");
    expect(formatSeconds(59.6)).toBe("1m00s");
    expect(formatSeconds(119.5)).toBe("2m00s");
    expect(formatSeconds(3599.7)).toBe("1h00m");
    expect(formatSeconds(7199)).toBe("2h00m");
    expect(formatSeconds(185.2)).toBe("3m05s");
    expect(formatSeconds(42.4)).toBe("42s");
    expect(formatSeconds(3725)).toBe("1h02m");
  });
});
