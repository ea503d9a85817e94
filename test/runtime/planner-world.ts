// A small world for planner scenario tests: nodes with labels and annotations, installer
// Jobs, a RuntimeClass, and what each host really has installed. `step()` runs the planner
// and applies its actions the way the adapter would; `check()` asserts the invariants.
import { isDeepStrictEqual } from 'util';
import { FINALIZER, plan, PlanInput, VisitMemos } from '../../src/runtime/planner';
import { Action, JobView, NodeView, RetryPolicy, RuntimeClassObject, ShimObject } from '../../src/runtime/types';

export const POLICY: RetryPolicy = { baseSeconds: 10, maxSeconds: 80, failureThreshold: 3 };

export class World {
  nodes = new Map<string, Omit<NodeView, 'name'>>();
  /** Handlers really installed on each host (what containerd would run). */
  hosts = new Map<string, Set<string>>();
  jobs: (JobView & { started: boolean })[] = [];
  runtimeClass?: RuntimeClassObject;
  shims: ShimObject[] = [];
  clock = Date.parse('2026-11-21T00:00:00Z');
  log: Action[][] = [];
  /** Most Jobs running at once, per Shim uid. */
  peak = new Map<string, number>();
  /**
   * Set: passes keep what they made of each node (VisitMemos), and node views keep their object
   * while the node does not change, as the controller's informers keep them; every pass is then
   * checked against a pass that visits every node afresh.
   */
  memo?: VisitMemos;
  /** How the passes say operations reach the nodes. */
  installMode?: 'jobs' | 'agent';
  private readonly kept = new Map<string, { text: string; view: NodeView }>();


  constructor(nodeNames: string[], labels: Record<string, string> = {}) {
    for (const n of nodeNames) {
      this.nodes.set(n, { labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', ...labels }, annotations: {}, ready: true, schedulable: true, bootID: 'boot-1' });
      this.hosts.set(n, new Set());
    }
  }

  get now(): string {
    return new Date(this.clock).toISOString();
  }

  views(): NodeView[] {
    return [...this.nodes].map(([name, n]) => ({ ...n, name, labels: { ...n.labels }, annotations: { ...n.annotations } }));
  }

  /** The views, each the same object as before while its node is unchanged. */
  private keptViews(): NodeView[] {
    return this.views().map(v => {
      const text = JSON.stringify(v);
      const before = this.kept.get(v.name);
      if (before?.text === text) return before.view;
      this.kept.set(v.name, { text, view: v });
      return v;
    });
  }

  /** One reconcile of the named Shim; returns its plan. */
  step(name: string, policy: RetryPolicy = POLICY) {
    const shim = this.shims.find(s => s.metadata.name === name)!;
    const input: PlanInput = {
      shim,
      nodes: this.memo ? this.keptViews() : this.views(),
      jobs: this.jobs.map(j => ({ ...j })),
      otherShims: this.shims.filter(s => s !== shim),
      runtimeClasses: this.runtimeClass ? [{
        name: this.runtimeClass.metadata.name,
        handler: this.runtimeClass.handler,
        annotations: this.runtimeClass.metadata.annotations,
        labels: this.runtimeClass.metadata.labels,
        shimOwners: (this.runtimeClass.metadata.ownerReferences as any[]).map(o => o.uid),
        foreignOwner: false,
        nodeSelector: this.runtimeClass.scheduling.nodeSelector,
        tolerations: this.runtimeClass.scheduling.tolerations,
        overhead: this.runtimeClass.overhead,
      }] : [],
      retry: policy,
      now: this.now,
      visits: this.memo,
      ...(this.installMode ? { installMode: this.installMode } : {}),
    };
    const result = plan(input);
    if (this.memo) {
      const afresh = plan({ ...input, nodes: this.views(), visits: undefined });
      if (!isDeepStrictEqual(result, afresh)) {
        throw new Error(`a pass with kept visits differs from one afresh:\n${JSON.stringify(result, null, 1)}\n---\n${JSON.stringify(afresh, null, 1)}`);
      }
    }
    for (const action of result.actions) this.apply(shim, action);
    shim.status = result.status;
    this.log.push(result.actions);
    const running = this.jobs.filter(j => j.shimUid === shim.metadata.uid && j.phase === 'running').length;
    this.peak.set(shim.metadata.uid, Math.max(this.peak.get(shim.metadata.uid) ?? 0, running));
    this.check();
    return result;
  }

  private apply(shim: ShimObject, action: Action): void {
    switch (action.kind) {
      case 'addFinalizer': shim.metadata.finalizers = [...shim.metadata.finalizers ?? [], FINALIZER]; break;
      case 'removeFinalizer': this.shims = this.shims.filter(s => s !== shim); break;
      case 'createJob': {
        const { job } = action;
        if (this.jobs.some(j => j.name === job.name)) break;
        this.jobs.push({
          name: job.name,
          shimUid: shim.metadata.uid,
          node: job.node,
          operation: job.operation,
          handler: job.handler,
          revision: job.revision,
          sha256: job.artifact?.sha256,
          attempt: job.attempt,
          batch: job.batch,
          phase: 'running',
          started: true,
        });
        break;
      }
      case 'deleteJob': this.jobs = this.jobs.filter(j => j.name !== action.name); break;
      case 'deleteSucceededJobs':
        this.jobs = this.jobs.filter(j => !(j.shimUid === shim.metadata.uid && j.phase === 'succeeded' && action.batches.includes(j.batch!)));
        break;
      case 'writeNode': {
        const n = this.nodes.get(action.node)!;
        for (const [k, v] of Object.entries(action.labels)) if (v === null) delete n.labels[k]; else n.labels[k] = v;
        for (const [k, v] of Object.entries(action.annotations)) if (v === null) delete n.annotations[k]; else n.annotations[k] = v;
        break;
      }
      case 'applyRuntimeClass': this.runtimeClass = action.object; break;
      case 'deleteRuntimeClass': this.runtimeClass = undefined; break;
      case 'event': break;
    }
  }

  /** The kubelet and installer: finish running Jobs that `which` picks, changing the hosts as the installer would. */
  finish(which: (j: JobView) => 'succeed' | 'fail' | 'hold' = () => 'succeed', result = { reason: 'ChecksumMismatch', message: 'sha256 differs' }): number {
    let n = 0;
    for (const job of this.jobs) {
      if (job.phase !== 'running') continue;
      const verdict = which(job);
      if (verdict === 'hold') continue;
      n++;
      Object.assign(job, { phase: verdict === 'succeed' ? 'succeeded' : 'failed', finishedAt: this.now, ...(verdict === 'fail' ? { result } : {}) });
      if (verdict !== 'succeed') continue;
      const host = this.hosts.get(job.node)!;
      if (job.operation === 'install') host.add(job.handler); else host.delete(job.handler);
    }
    this.check(); // the host changed before the controller saw it: the labels must already allow that
    return n;
  }

  tick(seconds: number): void {
    this.clock += seconds * 1000;
  }

  /** I1: every node the RuntimeClass selects has its handler installed. */
  check(): void {
    const rc = this.runtimeClass;
    if (!rc) return;
    for (const [name, n] of this.nodes) {
      const selected = Object.entries(rc.scheduling.nodeSelector).every(([k, v]) => n.labels[k] === v);
      if (selected && !this.hosts.get(name)!.has(rc.handler)) {
        throw new Error(`I1 broken: RuntimeClass ${rc.metadata.name} (handler ${rc.handler}) selects node ${name}, which has ${[...this.hosts.get(name)!].join(',') || 'nothing'}`);
      }
    }
  }

  /** I3: never two running Jobs of one handler on one node, whatever Shim they belong to. */
  checkOneOperationPerNode(): void {
    const seen = new Set<string>();
    for (const j of this.jobs.filter(x => x.phase === 'running')) {
      const key = `${j.node}/${j.handler}`;
      if (seen.has(key)) throw new Error(`I3 broken: two operations for ${key}`);
      seen.add(key);
    }
  }

  running(uid?: string): JobView[] {
    return this.jobs.filter(j => j.phase === 'running' && (!uid || j.shimUid === uid));
  }
}
