import { ChangeSetReports, mergedPatch, NodeReport } from '../../src/agent/change-set-reports';

// The node agent writes the outcomes of one change set (the requests it started together) in
// one Node patch: each member reports once or leaves, and the reports go when no member is
// still open, or a linger time after the first. Pure: the writer here records what it is given.

function reportOf(shim: string, labels: Record<string, string | null> = {}): NodeReport {
  return {
    shim,
    request: `${shim}-r1`,
    phase: 'succeeded',
    patch: { labels, annotations: { [`${shim}.shim.runtime.spinkube.dev/result`]: `{"name":"${shim}-r1"}` } },
    stillWanted: () => true,
  };
}

function recordingWriter(fail?: Error) {
  const writes: string[][] = [];
  const write = async (reports: readonly NodeReport[]) => {
    writes.push(reports.map(r => r.shim));
    if (fail) throw fail;
  };
  return { writes, write };
}

const HOUR = 3_600_000;

test('the outcomes of every member go in one write, once the last has reported', async () => {
  // GIVEN a change set of three requests
  const w = recordingWriter();
  const set = new ChangeSetReports(['a', 'b', 'c'], w.write, HOUR);
  // WHEN two report
  const first = set.report('a', reportOf('spin'));
  const second = set.report('b', reportOf('wasmtime'));
  await new Promise(r => setImmediate(r));
  // THEN nothing is written while the third is under way
  expect(w.writes).toEqual([]);
  // WHEN the third reports
  const third = set.report('c', reportOf('wasmedge'));
  await Promise.all([first, second, third]);
  // THEN one write carried the three, and every report resolved with it (no linger waited: an hour)
  expect(w.writes).toEqual([['spin', 'wasmtime', 'wasmedge']]);
});

test('a member that leaves (withdrawn, stopping) is not waited for', async () => {
  // GIVEN a change set of two, one of which reported
  const w = recordingWriter();
  const set = new ChangeSetReports(['a', 'b'], w.write, HOUR);
  const first = set.report('a', reportOf('spin'));
  // WHEN the other leaves without an outcome
  set.leave('b');
  await first;
  // THEN the report is written alone, at once
  expect(w.writes).toEqual([['spin']]);
});

test('leaving after reporting changes nothing, and a change set whose members all left writes nothing', async () => {
  const w = recordingWriter();
  const set = new ChangeSetReports(['a', 'b'], w.write, HOUR);
  const first = set.report('a', reportOf('spin'));
  // the run of a ends after its report: it leaves too
  set.leave('a');
  await new Promise(r => setImmediate(r));
  expect(w.writes).toEqual([]);
  set.leave('b');
  await first;
  expect(w.writes).toEqual([['spin']]);

  const none = recordingWriter();
  const empty = new ChangeSetReports(['x', 'y'], none.write, HOUR);
  empty.leave('x');
  empty.leave('y');
  await new Promise(r => setImmediate(r));
  expect(none.writes).toEqual([]);
});

test('a member slower than the linger time writes its outcome alone, later', async () => {
  // GIVEN a change set of two with a short linger time
  const w = recordingWriter();
  const set = new ChangeSetReports(['a', 'b'], w.write, 50);
  // WHEN one reports and the other does not within the linger time
  await set.report('a', reportOf('spin'));
  // THEN the first went without it
  expect(w.writes).toEqual([['spin']]);
  // AND the late one is written by itself when it comes
  await set.report('b', reportOf('wasmtime'));
  expect(w.writes).toEqual([['spin'], ['wasmtime']]);
});

test('a failed write of several is tried again report by report: each fails only for itself', async () => {
  // GIVEN a writer that refuses any write carrying the spin report (a label value the API server rejects)
  const writes: string[][] = [];
  const write = async (reports: readonly NodeReport[]) => {
    writes.push(reports.map(r => r.shim));
    if (reports.some(r => r.shim === 'spin')) throw new Error('422 Unprocessable Entity');
  };
  const set = new ChangeSetReports(['a', 'b', 'c'], write, HOUR);
  // WHEN three members report
  const results = await Promise.allSettled([set.report('a', reportOf('spin')), set.report('b', reportOf('wasmtime')), set.report('c', reportOf('wws'))]);
  // THEN the joint write failed, each was then written alone, and only spin's report failed
  expect(results.map(r => r.status)).toEqual(['rejected', 'fulfilled', 'fulfilled']);
  expect((results[0] as PromiseRejectedResult).reason.message).toMatch(/422/);
  expect(writes).toEqual([['spin', 'wasmtime', 'wws'], ['spin'], ['wasmtime'], ['wws']]);
});

test('a failed write of one report fails it, without a second try here', async () => {
  const w = recordingWriter(new Error('429 Too Many Requests'));
  const set = new ChangeSetReports(['a', 'b'], w.write, HOUR);
  set.leave('b');
  await expect(set.report('a', reportOf('spin'))).rejects.toThrow(/429/);
  expect(w.writes).toEqual([['spin']]);
});

test('a report from no member of the set is written by itself', async () => {
  const w = recordingWriter();
  const set = new ChangeSetReports(['a'], w.write, HOUR);
  await set.report('stranger', reportOf('spin'));
  expect(w.writes).toEqual([['spin']]);
});

describe('mergedPatch', () => {
  test('the Shims\' keys side by side; labels only where a report has some', () => {
    const patch = mergedPatch([reportOf('spin', { 'spin.shim.runtime.spinkube.dev/handler': 'spin' }), reportOf('wasmtime')]);
    expect(patch).toEqual({
      metadata: {
        labels: { 'spin.shim.runtime.spinkube.dev/handler': 'spin' },
        annotations: { 'spin.shim.runtime.spinkube.dev/result': '{"name":"spin-r1"}', 'wasmtime.shim.runtime.spinkube.dev/result': '{"name":"wasmtime-r1"}' },
      },
    });
    expect(mergedPatch([reportOf('wasmtime')]).metadata).not.toHaveProperty('labels');
  });

  test('of one Shim, the later report\'s keys win, as its own later write would', () => {
    const earlier = reportOf('spin', { 'spin.shim.runtime.spinkube.dev/state': 'failed' });
    const later = { ...reportOf('spin', { 'spin.shim.runtime.spinkube.dev/state': 'provisioned' }), request: 'spin-r2' };
    later.patch.annotations['spin.shim.runtime.spinkube.dev/result'] = '{"name":"spin-r2"}';
    const patch = mergedPatch([earlier, later]);
    expect(patch.metadata.labels).toEqual({ 'spin.shim.runtime.spinkube.dev/state': 'provisioned' });
    expect(patch.metadata.annotations['spin.shim.runtime.spinkube.dev/result']).toBe('{"name":"spin-r2"}');
  });
});
