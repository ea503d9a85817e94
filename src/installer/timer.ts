/** The run's timings (the result's `timings`): each named step's milliseconds, summed. */
export class Timer {
  /** startupMs: from the process's start to here (Node.js itself, loading the bundle, reading the flags). */
  readonly timings: Record<string, number> = { startupMs: Math.round(performance.now()) };
  private readonly start = Date.now();
  async time<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    const t = Date.now();
    try {
      return await fn();
    } finally {
      this.timings[`${name}Ms`] = (this.timings[`${name}Ms`] ?? 0) + Date.now() - t;
    }
  }
  total(): Record<string, number> {
    return { ...this.timings, totalMs: Date.now() - this.start };
  }
}
