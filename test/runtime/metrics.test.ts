import { Metrics } from '../../src/runtime/metrics';
import { JobView } from '../../src/runtime/types';

const BASE: JobView = {
  name: 'rcm-spin-n1-i-1',
  shimUid: 'u1',
  node: 'n1',
  operation: 'install',
  handler: 'spin',
  revision: 'r1',
  attempt: 1,
  phase: 'succeeded',
  started: true,
  createdAt: '2026-11-22T00:00:00Z',
  finishedAt: '2026-11-22T00:00:12Z',
};
const view = (over: Partial<JobView>): JobView => ({ ...BASE, ...over });

describe('Metrics', () => {
  test('a Shim that is gone leaves no rcm_rollout_nodes series', async () => {
    // GIVEN two Shims observed
    const m = new Metrics();
    m.observeRollout('spin', { nodes: 3, nodesReady: 2, nodesFailed: 1 } as any);
    m.observeRollout('kata', { nodes: 1, nodesReady: 1, nodesFailed: 0 } as any);
    // WHEN one is forgotten
    m.forgetShim('spin');
    // THEN only the other's series remain
    const text = await m.registry.getSingleMetricAsString('rcm_rollout_nodes');
    expect(text).not.toMatch(/shim="spin"/);
    expect(text.split('\n').filter(l => l.startsWith('rcm_rollout_nodes{')).sort()).toEqual([
      'rcm_rollout_nodes{shim="kata",state="failed"} 0',
      'rcm_rollout_nodes{shim="kata",state="ready"} 1',
      'rcm_rollout_nodes{shim="kata",state="selected"} 1',
    ]);
  });

  test('watch events and their bytes are counted per resource, each once, whichever counter is read first', async () => {
    // GIVEN events received on two watches
    const m = new Metrics();
    const nodes = m.receivedOn('nodes');
    const jobs = m.receivedOn('jobs');
    nodes(100);
    nodes(50);
    jobs(7);
    const lines = async (metric: string) => (await m.registry.getSingleMetricAsString(metric)).split('\n').filter(l => l.startsWith(`${metric}{`)).sort();
    // WHEN the bytes are read first, then the events
    expect(await lines('rcm_watch_bytes_total')).toEqual(['rcm_watch_bytes_total{resource="jobs"} 7', 'rcm_watch_bytes_total{resource="nodes"} 150']);
    expect(await lines('rcm_watch_events_total')).toEqual(['rcm_watch_events_total{resource="jobs"} 1', 'rcm_watch_events_total{resource="nodes"} 2']);
    // THEN later events add to the sums, and a second counter for the same watch shares them
    m.receivedOn('nodes')(10);
    expect(await lines('rcm_watch_events_total')).toEqual(['rcm_watch_events_total{resource="jobs"} 1', 'rcm_watch_events_total{resource="nodes"} 3']);
    expect(await lines('rcm_watch_bytes_total')).toEqual(['rcm_watch_bytes_total{resource="jobs"} 7', 'rcm_watch_bytes_total{resource="nodes"} 160']);
  });

  test('each finished Job\'s duration is observed once, by operation and outcome', async () => {
    const m = new Metrics();
    const jobs = [
      view({}),
      view({ name: 'rcm-spin-n2-i-1', node: 'n2', phase: 'failed', finishedAt: '2026-11-22T00:01:00Z' }),
      view({ name: 'rcm-spin-n3-i-1', node: 'n3', phase: 'running', finishedAt: undefined }),
    ];
    // WHEN the same Jobs are seen on three reconciles
    m.observeJobs(jobs);
    m.observeJobs(jobs);
    m.observeJobs(jobs);
    // THEN one observation each: 12 s succeeded, 60 s failed, nothing for the running one
    const text = await m.registry.getSingleMetricAsString('rcm_node_operation_duration_seconds');
    expect(text).toMatch(/rcm_node_operation_duration_seconds_count\{operation="install",outcome="success"\} 1/);
    expect(text).toMatch(/rcm_node_operation_duration_seconds_sum\{operation="install",outcome="success"\} 12/);
    expect(text).toMatch(/rcm_node_operation_duration_seconds_sum\{operation="install",outcome="failure"\} 60/);
    expect(text).toMatch(/rcm_node_operation_duration_seconds_bucket\{le="10",operation="install",outcome="success"\} 0/);
    expect(text).toMatch(/rcm_node_operation_duration_seconds_bucket\{le="20",operation="install",outcome="success"\} 1/);
    // AND a Job name reused by a later attempt (a new creation time) counts again
    m.observeJobs([view({ createdAt: '2026-11-22T00:05:00Z', finishedAt: '2026-11-22T00:05:03Z' })]);
    expect(await m.registry.getSingleMetricAsString('rcm_node_operation_duration_seconds')).toMatch(/_count\{operation="install",outcome="success"\} 2/);
  });

  test('names follow Prometheus conventions', async () => {
    const names = (await new Metrics().registry.getMetricsAsJSON()).map(x => ({ name: x.name, type: String(x.type) })).filter(x => x.name.startsWith('rcm_'));
    for (const { name, type } of names) {
      expect(name).toMatch(/^rcm_[a-z_]+$/);
      if (type === 'counter') expect(name).toMatch(/_total$/);
      if (type === 'histogram') expect(name).toMatch(/_seconds$/);
    }
    expect(names.map(n => n.name)).toEqual(expect.arrayContaining(['rcm_reconcile_duration_seconds', 'rcm_node_operation_duration_seconds']));
  });
});
