// How long the controller's passes take. The node agents need it: the passes of several Shims
// run at once (one per worker) and each writes its requests as it goes, so a node's requests
// that one change causes arrive up to a pass interval plus a pass's own time apart. On a loaded
// controller (a busy API server, a rollout writing many requests per pass) that time is what
// spreads them, and it is measured here rather than assumed.

/** The slowest pass within the last `windowMs`, the passes under way included (as far as they got). */
export class PassDurations {
  /** Passes kept: decreasing durations from the oldest (a pass slower and later than another makes that one irrelevant). */
  private readonly kept: { readonly at: number; readonly ms: number }[] = [];
  /** When each pass under way began. */
  private readonly running = new Map<symbol, number>();

  constructor(private readonly windowMs = 60_000) {}

  /** A pass begins at `at` (ms); `end` records it. */
  begin(at: number): { end(at: number): void } {
    const id = Symbol('pass');
    this.running.set(id, at);
    return {
      end: (endedAt: number) => {
        if (this.running.delete(id)) this.record(endedAt - at, endedAt);
      },
    };
  }

  /** A pass that ended at `at` (ms) after `ms` milliseconds. */
  record(ms: number, at: number): void {
    while (this.kept.length > 0 && this.kept[this.kept.length - 1].ms <= ms) this.kept.pop();
    this.kept.push({ at, ms });
  }

  /**
   * The slowest pass that ended within the window before `now`, or the longest under way so
   * far if that is longer (the first passes after a start have no history); 0 without either.
   */
  slowest(now: number): number {
    while (this.kept.length > 0 && this.kept[0].at < now - this.windowMs) this.kept.shift();
    let slowest = this.kept[0]?.ms ?? 0;
    for (const began of this.running.values()) slowest = Math.max(slowest, now - began);
    return slowest;
  }
}
