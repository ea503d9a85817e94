import { PassDurations } from '../../src/runtime/pass-durations';

describe('PassDurations: the slowest pass of the last window', () => {
  test.each([
    ['no pass', [], 1000, 0],
    ['one pass', [[200, 0]], 1000, 200],
    ['the slowest of several', [[200, 0], [900, 100], [300, 200]], 1000, 900],
    ['a slow pass leaves the window: the slowest after it counts', [[900, 0], [300, 200], [100, 300]], 60_100, 300],
    ['every pass out of the window', [[900, 0], [300, 200]], 61_000, 0],
    ['a later pass as slow replaces an earlier one (it stays longer)', [[500, 0], [500, 30_000]], 70_000, 500],
    ['a faster pass after a slow one counts once the slow one is gone', [[800, 0], [100, 50_000]], 60_500, 100],
  ] as [string, [number, number][], number, number][])('%s', (_, passes, now, expected) => {
    // GIVEN passes (duration, end) recorded in order of their ends
    const durations = new PassDurations(60_000);
    for (const [ms, at] of passes) durations.record(ms, at);
    // WHEN the slowest is asked for at `now`
    // THEN it is the slowest pass that ended within the minute before
    expect(durations.slowest(now)).toBe(expected);
  });

  test('keeps only the passes that can still be the slowest', () => {
    // GIVEN a thousand passes, each faster than the one before
    const durations = new PassDurations(60_000);
    for (let i = 0; i < 1000; i++) durations.record(1000 - i, i);
    // AND then one slower than all of them
    durations.record(5000, 1000);
    // THEN it alone is kept: every earlier pass ends sooner and took less
    expect((durations as any).kept).toEqual([{ at: 1000, ms: 5000 }]);
    expect(durations.slowest(1000)).toBe(5000);
  });
});

describe('PassDurations: passes under way', () => {
  test('a pass under way counts as far as it got, when that is the slowest', () => {
    // GIVEN a fresh controller's first two passes, begun at 0 and 100, and none ended
    const durations = new PassDurations(60_000);
    const first = durations.begin(0);
    durations.begin(100);
    // THEN at 250 the slowest is the first's 250 ms so far
    expect(durations.slowest(250)).toBe(250);
    // WHEN the first ends at 300
    first.end(300);
    // THEN it is recorded (300 ms), and the second, under way for 400 ms at 500, is slower
    expect(durations.slowest(300)).toBe(300);
    expect(durations.slowest(500)).toBe(400);
  });

  test('a pass ended twice is recorded once; one that ended no longer counts as under way', () => {
    const durations = new PassDurations(60_000);
    const pass = durations.begin(0);
    pass.end(50);
    pass.end(5000);
    expect(durations.slowest(100)).toBe(50);
    expect(durations.slowest(70_000)).toBe(0);
  });
});
