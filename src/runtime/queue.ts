// A work queue keyed by Shim name: a key waits at most once, is never processed by two
// workers at once, and failures are retried with per-key exponential backoff.

export class WorkQueue {
  private readonly waiting = new Set<string>();
  private readonly order: string[] = [];
  private readonly active = new Set<string>();
  /** Keys added while being processed: queued again when their worker finishes. */
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  /** When each key's last reconcile ended: events for it within `minIntervalMs` are batched. */
  private readonly finished = new Map<string, number>();
  private readonly deferred = new Set<string>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly sleepers: (() => void)[] = [];
  private stopped = false;

  /**
   * @param minIntervalMs the least time between two reconciles of one key: a rollout over
   *   thousands of nodes raises an event per Job, pod and node write, and one pass per
   *   interval handles them all (the status is then written at most that often too)
   */
  constructor(private readonly baseDelayMs = 200, private readonly maxDelayMs = 60_000, private readonly minIntervalMs: () => number = () => 0) {}

  get depth(): number {
    return this.waiting.size;
  }

  add(key: string): void {
    if (this.stopped) return;
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.waiting.has(key) || this.deferred.has(key)) return;
    const wait = (this.finished.get(key) ?? -Infinity) + this.minIntervalMs() - Date.now();
    if (wait > 0) {
      this.deferred.add(key);
      this.addAfter(key, wait, () => this.deferred.delete(key));
      return;
    }
    this.waiting.add(key);
    this.order.push(key);
    this.sleepers.shift()?.();
  }

  addAfter(key: string, delayMs: number, before?: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      before?.();
      this.add(key);
    }, delayMs);
    this.timers.add(timer);
  }

  /** Schedules a retry with backoff; returns the delay. */
  retry(key: string): number {
    const n = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, n);
    const delay = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (n - 1));
    this.addAfter(key, delay);
    return delay;
  }

  forget(key: string): void {
    this.failures.delete(key);
  }

  /** The next key to process, or undefined once stopped. */
  async next(): Promise<string | undefined> {
    while (!this.stopped) {
      const key = this.order.shift();
      if (key !== undefined) {
        this.waiting.delete(key);
        this.active.add(key);
        return key;
      }
      await new Promise<void>(resolve => this.sleepers.push(resolve));
    }
    return undefined;
  }

  done(key: string): void {
    this.active.delete(key);
    this.finished.set(key, Date.now());
    if (this.dirty.delete(key)) this.add(key);
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    for (const wake of this.sleepers.splice(0)) wake();
  }
}
