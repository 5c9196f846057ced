// drainOnSignals(): a worker process's SIGTERM and SIGINT wired to run()'s
// graceful stop, as the Go examples wire them to worker.WithDrain.

/** What drainOnSignals() returns: the two signals to give run(), and how to stop listening. */
export interface SignalShutdown {
  /** Aborted at the first of the process signals: give it to run() as RunOptions.drain. */
  readonly drain: AbortSignal;
  /** Aborted at the second one: give it to run() as RunOptions.signal (stop at once). */
  readonly signal: AbortSignal;
  /** Removes the listeners: a signal then does what it did before (Node's default: exit). Idempotent. */
  dispose(): void;
}

/** Configures drainOnSignals(). */
export interface SignalShutdownOptions {
  /** The process signals listened to. Default SIGTERM and SIGINT. */
  signals?: readonly NodeJS.Signals[];
  /**
   * Told of each signal received: "drain" for the first (run() takes no
   * more jobs, the running ones may finish), "stop" for the second (they
   * are stopped now), for a log line.
   */
  onSignal?: (signal: NodeJS.Signals, phase: "drain" | "stop") => void;
}

/**
 * Listens for SIGTERM and SIGINT (the signals a process manager, a
 * container runtime or Ctrl-C send) in place of Node's default, which
 * exits at once: a worker killed with its announcement standing is offered
 * jobs until those offers time out, and a restart under the same id waits
 * for them (PROTOCOL.md §22.4). The first signal aborts `drain`, the
 * second `signal`:
 *
 * ```ts
 * const stop = drainOnSignals();
 * try {
 *   await w.run(queue, handler, { drain: stop.drain, signal: stop.signal, drainTimeoutMs: 30_000 });
 * } finally {
 *   stop.dispose();
 *   await w.close();
 * }
 * ```
 *
 * run() then withdraws its capacity at the first signal, lets the running
 * handlers finish for up to drainTimeoutMs, aborts the signals of those
 * still running (their leases released) at the timeout or at the second
 * signal, and resolves once every result is reported. A third signal
 * finds the listener still there and is ignored; dispose() gives the
 * signals back to Node.
 */
export function drainOnSignals(opts: SignalShutdownOptions = {}): SignalShutdown {
  const signals = opts.signals ?? (["SIGTERM", "SIGINT"] as const);
  const drain = new AbortController();
  const stop = new AbortController();
  const on = (sig: NodeJS.Signals) => {
    const phase = drain.signal.aborted ? "stop" : "drain";
    if (phase === "stop" && stop.signal.aborted) return;
    try {
      opts.onSignal?.(sig, phase);
    } finally {
      (phase === "drain" ? drain : stop).abort(new Error(`${sig} received`));
    }
  };
  for (const s of signals) process.on(s, on);
  let disposed = false;
  return {
    drain: drain.signal,
    signal: stop.signal,
    dispose() {
      if (disposed) return;
      disposed = true;
      for (const s of signals) process.off(s, on);
    },
  };
}
