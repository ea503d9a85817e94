// Benchmark (not a test): one pass of the planner over a fleet in the middle of a rollout of
// three Shims (rolling 10%: a tenth of the nodes with an installer Job of each Shim running, a
// third of the rest done), the nodes' views kept from pass to pass as the controller's
// informers keep them. Passes that keep what they made of each node (VisitMemos, as the
// controller runs them) beside passes that visit every node (the planner before them), in
// the same process, interleaved. In a controller the gap is wider than here: its node views
// are scattered over a large heap, where these sit side by side.
//
//   npx ts-node --transpile-only -P tsconfig.json bench/planner.bench.ts [nodes[,nodes...]]
import { FINALIZER, plan, PlanInput, VisitMemos } from '../src/runtime/planner';
import { NodeView, ShimObject } from '../src/runtime/types';
import { POLICY, World } from '../test/runtime/planner-world';

const SIZES = (process.argv[2] ?? '2000,5000').split(',').map(Number);
const PASSES = 60;
const ROUNDS = 5;

function shimOf(name: string, uid: string): ShimObject {
  return {
    metadata: { name, uid, generation: 1, creationTimestamp: '2026-01-01T00:00:00Z', finalizers: [FINALIZER] },
    spec: {
      fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: `https://example.com/${name}.tgz`, sha256: 'a'.repeat(64) } },
      runtimeClass: { name, handler: name },
      rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: '10%' } },
    },
  };
}

/** A fleet part way through the rollout: the inputs of each Shim's pass. */
function midRollout(size: number): PlanInput[] {
  const names = Array.from({ length: size }, (_, i) => `node-${String(i).padStart(5, '0')}`);
  const w = new World([]);
  names.forEach((name, i) => {
    // A kubelet's labels (the planner reads labels and annotations; the rest of a Node it does not keep).
    w.nodes.set(name, {
      labels: {
        'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'kubernetes.io/hostname': name,
        'beta.kubernetes.io/os': 'linux', 'beta.kubernetes.io/arch': 'amd64', 'node.kubernetes.io/instance-type': 'm5.xlarge',
        'topology.kubernetes.io/region': 'eu-west-1', 'topology.kubernetes.io/zone': `eu-west-1${'abc'[i % 3]}`,
        'node-role.kubernetes.io/worker': '', 'example.com/pool': `pool-${i % 4}`,
      },
      annotations: { 'node.alpha.kubernetes.io/ttl': '0', 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' },
      ready: true, schedulable: true, bootID: `boot-${i}`,
    });
    w.hosts.set(name, new Set());
  });
  w.shims = [shimOf('spin', 'u1'), shimOf('wasmtime', 'u2'), shimOf('wws', 'u3')];
  // Three waves done, the fourth under way.
  for (let wave = 0; wave < 4; wave++) {
    for (const s of w.shims) w.step(s.metadata.name);
    if (wave < 3) w.finish();
    for (const s of w.shims) w.step(s.metadata.name); // records the results, removes the Jobs
    w.tick(5);
  }
  const nodes: NodeView[] = w.views();
  const jobs = w.jobs.map(j => ({ ...j }));
  return w.shims.map(shim => ({ shim, nodes, jobs, otherShims: w.shims.filter(o => o !== shim), runtimeClasses: [], retry: POLICY, now: w.now }));
}

function msPerPass(inputs: PlanInput[], visits: VisitMemos | undefined): number {
  const start = process.hrtime.bigint();
  // Each pass gets a list of its own, as the informers' list() gives one.
  for (let i = 0; i < PASSES; i++) plan({ ...inputs[i % inputs.length], nodes: [...inputs[i % inputs.length].nodes], visits });
  return Number(process.hrtime.bigint() - start) / 1e6 / PASSES;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

for (const size of SIZES) {
  const inputs = midRollout(size);
  const visits = new VisitMemos();
  msPerPass(inputs, undefined); // warm up both
  msPerPass(inputs, visits);
  const afresh: number[] = [];
  const kept: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    afresh.push(msPerPass(inputs, undefined));
    kept.push(msPerPass(inputs, visits));
  }
  const running = inputs[0].jobs.filter(j => j.phase === 'running').length;
  console.log(`${size} nodes, 3 Shims, ${running} installer Jobs running; median of ${ROUNDS} rounds of ${PASSES} passes`);
  console.log(`  every node visited (baseline): ${median(afresh).toFixed(2)} ms a pass`);
  console.log(`  visits kept (VisitMemos):      ${median(kept).toFixed(2)} ms a pass, ${(median(kept) / median(afresh)).toFixed(2)}x; ${(visits.unvisited / ((ROUNDS + 1) * PASSES)).toFixed(0)} of ${size} nodes a pass not visited`);
}
