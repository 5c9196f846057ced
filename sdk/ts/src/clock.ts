// The clock of the renew loops and of the local deadlines of leases and
// offers (the Go SDK's package clock). Tests give a fake one.

/** A timer that can be stopped. */
export interface Timer {
  stop(): void;
}

/** What the SDK needs of a clock: a monotonic "now" and timers. */
export interface Clock {
  /** Milliseconds, monotonic, on the scale of the Unix epoch. */
  now(): number;
  /** Calls fn once, ms milliseconds from now (at once for ms <= 0). */
  setTimer(fn: () => void, ms: number): Timer;
}

// Longest delay setTimeout takes: past it, it fires at once.
const maxDelay = 2 ** 31 - 1;

/**
 * The real clock: performance.now() on the epoch scale (never goes back,
 * whatever the wall clock does), and setTimeout, re-armed for delays past
 * its limit of 24.8 days. Its timers do not keep the process alive.
 */
export const realClock: Clock = {
  now: () => performance.timeOrigin + performance.now(),
  setTimer(fn: () => void, ms: number): Timer {
    let h: NodeJS.Timeout | undefined;
    const at = realClock.now() + ms;
    const arm = () => {
      const left = at - realClock.now();
      h = setTimeout(left > maxDelay ? arm : fn, Math.max(0, Math.min(left, maxDelay)));
      h.unref?.();
    };
    arm();
    return { stop: () => clearTimeout(h) };
  },
};
