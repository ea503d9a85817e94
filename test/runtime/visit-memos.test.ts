import { POLICY, World } from './planner-world';
import { FINALIZER, RETRY_ANNOTATION, VisitMemos } from '../../src/runtime/planner';
import { JobView, ShimObject } from '../../src/runtime/types';

// A pass keeps what it made of each node (VisitMemos): a node that is the same object, with no
// Job on it, under the same settings, is counted again without a visit. Every pass of these
// worlds is checked against a pass that visits every node afresh (World.memo): they must be
// equal, action for action, through rollouts, failures and retries, nodes going down, cordoned,
// rebooted and relabelled, a new revision, a retry request, a selector or retry policy
// changed, a Shim deleted, nodes joining and leaving, failed Jobs removed by hand; a quarter of
// the worlds in install mode NodeAgent.

/** A small seeded generator (Park and Miller's): the same worlds every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a * 48271) % 2147483647;
    return a / 2147483647;
  };
}

function shimOf(name: string, uid: string, maxUpdate: string, nodeSelector?: Record<string, string>): ShimObject {
  return {
    metadata: { name, uid, generation: 1, creationTimestamp: '2026-01-01T00:00:00Z', finalizers: [FINALIZER] },
    spec: {
      fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: `https://e.com/${name}.tgz` } },
      runtimeClass: { name, handler: name },
      rolloutStrategy: { type: 'rolling', rolling: { maxUpdate } },
      ...(nodeSelector ? { nodeSelector } : {}),
    },
  };
}

test.each(Array.from({ length: 120 }, (_, i) => i + 1))('world %i: every pass with kept visits equals a pass afresh', seed => {
  const rnd = random(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const names = Array.from({ length: 5 + Math.floor(rnd() * 30) }, (_, i) => `node-${String(i).padStart(2, '0')}`);
  const w = new World(names);
  w.memo = new VisitMemos();
  if (seed % 4 === 0) w.installMode = 'agent';
  let policy = { ...POLICY, failureThreshold: pick([2, 3]) };
  const shims = ['spin', 'wasmtime', 'wws'].slice(0, 1 + Math.floor(rnd() * 3))
    .map((name, i) => shimOf(name, `u${i}`, pick(['1', '2', '25%', '50%', '100%']), rnd() < 0.3 ? { pool: 'wasm' } : undefined));
  w.shims = [...shims];
  for (const n of names) if (rnd() < 0.7) w.nodes.get(n)!.labels.pool = 'wasm';
  let joined = 0;
  let passes = 0;
  for (let step = 0; step < 60 && w.shims.length > 0; step++) {
    // A pass (or two) of a Shim, as the controller's queue might run them.
    for (let k = 0; k < 1 + Math.floor(rnd() * 2) && w.shims.length > 0; k++) {
      w.step(pick(w.shims).metadata.name, policy);
      passes++;
    }
    // The kubelets and installers: some Jobs end, some fail, others go on.
    w.finish((j: JobView) => (rnd() < (seed % 3 === 0 ? 0.4 : 0.1) ? 'fail' : rnd() < 0.6 ? 'succeed' : 'hold'));
    w.tick(pick([1, 5, 20, 90]));
    // The fleet changes now and then.
    const node = w.nodes.get(pick([...w.nodes.keys()]));
    const change = rnd();
    if (node && change < 0.08) {
      node.ready = !node.ready;
    } else if (node && change < 0.14) {
      node.schedulable = !node.schedulable;
    } else if (node && change < 0.18) {
      node.bootID = `boot-${step}`;
    } else if (node && change < 0.24) {
      if (node.labels.pool) delete node.labels.pool; else node.labels.pool = 'wasm';
    } else if (change < 0.27) {
      const s = pick(w.shims);
      s.spec = { ...s.spec, fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: `https://e.com/${s.metadata.name}-${step}.tgz` } } };
    } else if (change < 0.30) {
      const s = pick(w.shims);
      s.metadata = { ...s.metadata, annotations: { [RETRY_ANNOTATION]: `r${step}` } };
    } else if (change < 0.32) {
      const name = `joined-${joined++}`;
      w.nodes.set(name, { labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'pool': 'wasm' }, annotations: {}, ready: true, schedulable: true, bootID: 'boot-1' });
      w.hosts.set(name, new Set());
    } else if (change < 0.34 && w.nodes.size > 3) {
      // A node leaves (one without a running installer: its pod would be gone with it).
      const gone = pick([...w.nodes.keys()]);
      if (!w.running().some(j => j.node === gone)) {
        w.nodes.delete(gone);
        w.hosts.delete(gone);
      }
    } else if (change < 0.45) {
      // An admin (or a TTL) removes a failed Job the controller kept for inspection.
      const failed = w.jobs.filter(j => j.phase === 'failed');
      if (failed.length > 0) {
        const gone = pick(failed);
        w.jobs = w.jobs.filter(j => j !== gone);
      }
    } else if (change < 0.47) {
      // A Shim's selector changes, or the retry policy.
      const s = pick(w.shims);
      if (rnd() < 0.5) s.spec = { ...s.spec, nodeSelector: s.spec.nodeSelector ? undefined : { pool: 'wasm' } };
      else policy = { ...policy, failureThreshold: policy.failureThreshold === 2 ? 3 : 2 };
    } else if (change < 0.48) {
      // A node joins at the end of the list (no other node moves).
      const name = `zz-joined-${joined++}`;
      w.nodes.set(name, { labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' }, annotations: {}, ready: true, schedulable: true, bootID: 'boot-1' });
      w.hosts.set(name, new Set());
    } else if (change < 0.49 && step > 40) {
      const s = pick(w.shims);
      s.metadata = { ...s.metadata, deletionTimestamp: w.now };
    }
  }
  // THEN the passes ran (each compared inside World.step), and counted nodes unvisited
  expect(passes).toBeGreaterThan(30);
  expect(w.memo.unvisited).toBeGreaterThan(0);
});

test('nodes as they were are counted without a visit: the same figures, and an admitted node is admitted as before', () => {
  // GIVEN a fleet of 200 nodes, one Shim rolling 10 at a time, passes with kept visits
  const names = Array.from({ length: 200 }, (_, i) => `n-${String(i).padStart(3, '0')}`);
  const w = new World(names);
  w.memo = new VisitMemos();
  w.shims = [shimOf('spin', 'u1', '5%')];
  // WHEN it rolls out to the end, every pass compared with a pass afresh
  let steps = 0;
  while (w.shims[0].status?.nodesReady !== 200 && steps++ < 200) {
    w.step('spin');
    w.finish();
    w.tick(5);
  }
  // THEN every node got the handler, never more than 10 at a time
  expect(w.shims[0].status?.nodesReady).toBe(200);
  expect(w.peak.get('u1')).toBeLessThanOrEqual(10);
  // AND most visits were not made: a pass visits the nodes with Jobs, those that changed, and
  // the candidates it admits
  expect(w.memo.unvisited).toBeGreaterThan(steps * 200 * 0.8);
});
