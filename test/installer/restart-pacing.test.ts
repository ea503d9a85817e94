import { Journal, settlementOf } from '../../src/installer/journal';
import { nextRestartAt, parseShow, parseTimespanMs, startLimitOf, unitFailure } from '../../src/installer/restart-pacing';

describe('systemd time spans as systemctl show prints them', () => {
  test.each([
    ['10s', 10_000], ['1min 30s', 90_000], ['500ms', 500], ['2min', 120_000], ['1h', 3_600_000], ['0', 0], ['infinity', Infinity], ['1.5s', 1500],
  ])('%s is %d ms', (text, ms) => expect(parseTimespanMs(text)).toBe(ms));
  test('text that is no time span is undefined', () => expect(parseTimespanMs('soon')).toBeUndefined());
});

describe('the start limit read from systemd', () => {
  test('the defaults of a stock unit', () => {
    expect(startLimitOf(parseShow('StartLimitBurst=5\nStartLimitIntervalUSec=10s\n'))).toEqual({ burst: 5, intervalMs: 10_000 });
  });
  test('an interval of 0 or infinity is no limit (kind\'s unit says StartLimitIntervalSec=0)', () => {
    expect(startLimitOf(parseShow('StartLimitBurst=5\nStartLimitIntervalUSec=0\n'))).toEqual({ burst: 5, intervalMs: 0 });
    expect(startLimitOf(parseShow('StartLimitBurst=5\nStartLimitIntervalUSec=infinity\n'))).toEqual({ burst: 5, intervalMs: 0 });
  });
  test('a systemd that says nothing gives no limit to pace by', () => expect(startLimitOf({})).toBeUndefined());
});

describe('nextRestartAt: restarts within the unit\'s limit, one start left to systemd', () => {
  const limit = { burst: 5, intervalMs: 10_000 };
  const now = 100_000;
  test.each<[string, number[], number]>([
    ['no start yet: now', [], now],
    ['three starts in the window: now (the fourth fits, the fifth is systemd\'s)', [95_000, 96_000, 97_000], now],
    ['four starts in the window: when the oldest leaves it (plus slack)', [95_000, 96_000, 97_000, 98_000], 95_000 + 10_500],
    ['starts older than the window do not count', [80_000, 85_000, 89_000, 97_000], now],
    ['six starts: when enough have left for one more', [91_000, 92_000, 93_000, 94_000, 95_000, 96_000], 93_000 + 10_500],
  ])('%s', (_name, starts, at) => expect(nextRestartAt(starts, limit, now)).toBe(at));
  test('no limit: now, whatever came before', () => {
    expect(nextRestartAt([99_000, 99_500, 99_900], { burst: 5, intervalMs: 0 }, now)).toBe(now);
    expect(nextRestartAt([99_000, 99_500, 99_900], undefined, now)).toBe(now);
  });
  test('a burst of 1: one start per interval', () => {
    expect(nextRestartAt([95_000], { burst: 1, intervalMs: 10_000 }, now)).toBe(105_500);
  });
  test('paced this way, a wave of restarts never exceeds the limit in any window', () => {
    // Every restart asks for the earliest moment allowed; systemd's rule: at most `burst` starts in any interval.
    const starts: number[] = [];
    let t = 0;
    for (let i = 0; i < 20; i++) {
      t = nextRestartAt(starts, limit, t);
      starts.push(t);
    }
    for (const s of starts) expect(starts.filter(x => x >= s && x < s + limit.intervalMs).length).toBeLessThanOrEqual(limit.burst - 1);
  });
});

test('a unit systemd gave up on is named with its result; an active one is not', () => {
  expect(unitFailure(parseShow('ActiveState=failed\nSubState=failed\nResult=start-limit-hit\n'))).toBe('start-limit-hit');
  expect(unitFailure(parseShow('ActiveState=failed\nSubState=failed\nResult=exit-code\n'))).toBe('exit-code');
  expect(unitFailure(parseShow('ActiveState=active\nSubState=running\nResult=success\n'))).toBeUndefined();
  expect(unitFailure(parseShow('ActiveState=activating\nSubState=auto-restart\nResult=exit-code\n'))).toBeUndefined();
});

describe('settlementOf: a change set is finished or undone as a whole', () => {
  const layout = (config: string) => ({ distro: 'containerd', config, effectiveConfig: config, template: false, socket: '/run/containerd/containerd.sock', unit: 'containerd' }) as any;
  const change = (handler: string, seq: number, original: string | null, edited: string | null, phase: Journal['phase'] = 'config-written', config = '/etc/containerd/config.toml'): Journal => ({
    handler, operation: 'install', phase, layout: layout(config), original, edited, mode: 0o644, createdPaths: [], removeWhenDone: [], set: 's', seq, owner: handler, startedAt: `2026-11-25T00:00:0${seq}Z`,
  });
  // Three changes to one file, each on the text the previous left: '' -> 'a' -> 'ab' -> 'abc'.
  const chain = [change('a', 0, '', 'a'), change('b', 1, 'a', 'ab'), change('c', 2, 'ab', 'abc')];
  const at = (text: string | null) => () => text;

  test.each<[string, Journal[], string | null, string]>([
    ['every change in the file, not restarted yet: finish', chain, 'abc', 'finish'],
    ['every change in, containerd came back: complete', chain.map(j => ({ ...j, phase: 'restarted' as const })), 'abc', 'complete'],
    ['the last change journalled but not written: undo all', [...chain.slice(0, 2), { ...chain[2], phase: 'prepared' as const }], 'ab', 'undo'],
    ['the file back to before the set (a rollback was interrupted): undo', chain.map(j => ({ ...j, phase: 'rolling-back' as const })), '', 'undo'],
    ['someone else changed the file since: abandon', chain, 'xyz', 'abandon'],
  ])('%s', (_name, journals, current, action) => expect(settlementOf(journals, at(current)).action).toBe(action));

  test('undo writes each file back to its bytes before the set, and restarts only if containerd may have read a change', () => {
    const partial = settlementOf([...chain.slice(0, 2), { ...chain[2], phase: 'prepared' as const }], at('ab'));
    expect(partial).toEqual({ action: 'undo', rewrite: new Map([['/etc/containerd/config.toml', '']]), restart: true });
    const untouched = settlementOf([{ ...chain[0], phase: 'prepared' as const }], at(''));
    expect(untouched).toEqual({ action: 'undo', rewrite: new Map(), restart: false });
  });

  test('drop-in files (containerd 2): each file is its own chain, the set still one', () => {
    const a = change('a', 0, null, 'A', 'config-written', '/etc/containerd/conf.d/rcm-a.toml');
    const b = change('b', 1, null, 'B', 'prepared', '/etc/containerd/conf.d/rcm-b.toml');
    const files: Record<string, string | null> = { '/etc/containerd/conf.d/rcm-a.toml': 'A', '/etc/containerd/conf.d/rcm-b.toml': null };
    expect(settlementOf([a, b], f => files[f])).toEqual({ action: 'undo', rewrite: new Map([['/etc/containerd/conf.d/rcm-a.toml', null]]), restart: true });
    files['/etc/containerd/conf.d/rcm-b.toml'] = 'B';
    expect(settlementOf([a, { ...b, phase: 'config-written' }], f => files[f]).action).toBe('finish');
  });
});
