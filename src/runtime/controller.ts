// The adapter between the planner and the API server: informers feed caches and a work
// queue; a reconcile reads the caches, asks the planner, and carries its actions out. Every
// decision is the planner's; this file only executes typed actions.
import { AgentNodeViews } from './agent-node-views';
import { admittedRequest, observeRequests } from './agent-requests';
import { Handlers, Informer } from './informer';
import { CreatedJob, ObservedJob } from './job-judgement';
import { ANNOTATION_SHIM, installerJob, JobObserver, JobSettings, LABEL_BATCH, LABEL_MANAGED_BY, LABEL_SHIM_UID, MANAGED_BY } from './jobs';
import { Metrics } from './metrics';
import { PassDurations } from './pass-durations';
import { FINALIZER, planPass, VisitMemos } from './planner';
import { WorkQueue } from './queue';
import { canonical } from './runtime-class';
import {
  AgentPod, NodeMetadata, nodeChangeAffects, samePlain, slimAgentPod, SlimJob, slimJob, slimNode, slimNodeMetadata, SlimPod, slimPod,
  slimRuntimeClass, slimShim,
} from './slim';
import { agentPodFromProto, jobFromProto, nodeFingerprint, nodeFromProto, nodeMetadataFromProto, objectMeta, podFromProto } from './slim-proto';
import { Action, JobRequest, JobView, NodeView, RetryPolicy, RuntimeClassView, ShimObject, ShimStatus } from './types';
import { AGENT_POD_SELECTOR, REQUESTS_LABELS, REQUESTS_NODE_ANNOTATION, REQUESTS_SELECTOR, isRecordedSuccess, requestsConfigMapName, requestsOn, resultKey } from '../shared/agent-protocol';
import { isConflictOrExists, isNotFound, Kube, unlessNotFound } from '../shared/kube/kube';
import { Logger } from '../shared/log';

export const FIELD_MANAGER = 'rcm-controller';

/**
 * What the adapter carries out: the planner's actions, and in install mode NodeAgent a node
 * write that records requests (they leave the view once the node shows it) and a request
 * recorded earlier (it leaves the view at once); see withRecordedRequests.
 */
type CarriedAction = Action | (Extract<Action, { kind: 'writeNode' }> & { readonly records?: readonly string[] })
| { readonly kind: 'recordedRequest'; readonly view: JobView };
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const EVENTS_NAMESPACE = 'default';

export interface ControllerSettings extends JobSettings {
  /**
   * How operations reach the nodes: installer Jobs, or requests in each node's requests ConfigMap that the
   * node's agent carries out (no Jobs nor pods are created or watched then).
   */
  readonly installMode?: 'jobs' | 'agent';
  readonly workers: number;
  readonly resyncSeconds: number;
  readonly retry: RetryPolicy;
}

/** What the controller asks of its Nodes' cache. */
interface NodeCache {
  readonly size: number;
  list(): NodeView[];
  get(name: string): NodeView | undefined;
}

export class Controller {
  /**
   * At most one reconcile of a Shim per second per thousand nodes (at least one second apart):
   * a pass costs time in proportion to the fleet, and events in between are handled by the
   * next pass anyway.
   */
  readonly queue = new WorkQueue(200, 60_000, () => this.passIntervalMs());
  /** How long passes took lately: the node agents wait that much longer for a change's requests (see AdmittedRequest). */
  private readonly passDurations = new PassDurations();
  /** What each Shim's last pass made of each node: nodes as they were are not visited again (planner.ts). */
  private readonly visits = new VisitMemos();
  private shims!: Informer<ShimObject>;
  /** Every Node as the planner sees it: read whole (install mode Jobs), or composed (AgentNodeViews). */
  private nodes!: NodeCache;
  /** The same, install mode NodeAgent: with the requests this controller admitted (its book). */
  private agentViews?: AgentNodeViews;
  /** The write of each node's requests under way (setRequest): one at a time per node. */
  private readonly requestWrites = new Map<string, Promise<void>>();
  private jobs?: Informer<SlimJob>;
  private pods?: Informer<SlimPod>;
  private readonly jobObserver = new JobObserver<SlimJob, SlimPod>();
  private runtimeClasses!: Informer<any>;
  private readonly informers: { stop(): void }[] = [];
  private resync?: NodeJS.Timeout;
  /**
   * Jobs this controller deleted that the (separately watched) cache may still show: a node
   * event can arrive before the Job's delete event. Facts for the planner, which leaves them
   * out; forgotten when a pass finds them settled, or on the Job's delete event.
   */
  private readonly deletedJobs = new Set<string>();
  /**
   * Jobs created here, and when, that the cache may not show yet (a watch event lags the
   * create): facts for the planner, which counts them (job-judgement.ts); forgotten when a
   * pass finds them settled.
   */
  private readonly createdJobs = new Map<string, CreatedJob>();
  /** Shims (by uid) whose finished Jobs are being removed by a request still under way. */
  private readonly cleaning = new Set<string>();
  private synced = false;

  constructor(private readonly kube: Kube, private readonly settings: ControllerSettings,
    private readonly log: Logger, private readonly metrics: Metrics) {}

  /**
   * The least time between two passes of one Shim. The node agents learn it from each request:
   * a node's requests of several Shims, caused by one change, arrive at most this far apart.
   */
  private passIntervalMs(): number {
    return Math.max(1000, this.nodes?.size ?? 0);
  }

  get ready(): boolean {
    return this.synced;
  }

  async start(): Promise<void> {
    const enqueueAll = () => this.shims?.list().forEach(s => this.queue.add(s.metadata.name));
    const byAnnotation = (o: any) => {
      const shim = o?.metadata?.annotations?.[ANNOTATION_SHIM];
      if (shim) this.queue.add(shim);
    };
    const onNode = (before?: NodeView, after?: NodeView) => {
      for (const shim of this.shims.list()) if (nodeChangeAffects(shim, before, after)) this.queue.add(shim.metadata.name);
    };
    this.shims = await this.inform(SHIMS, { json: slimShim }, {
      add: s => this.queue.add(s.metadata.name),
      update: (_, s) => this.queue.add(s.metadata.name),
      // A reconcile of a Shim that is gone drops its metric series.
      delete: s => this.queue.add(s.metadata.name),
    });
    if (this.agentMode) {
      this.nodes = await this.informAgentNodes(onNode);
    } else {
      this.nodes = await this.inform<NodeView>('/api/v1/nodes', { json: slimNode, protobuf: nodeFromProto, fingerprint: nodeFingerprint, keepsEqual: true }, { add: n => onNode(undefined, n), update: onNode, delete: n => onNode(n, undefined) });
      await this.informJobs(byAnnotation);
    }
    this.runtimeClasses = await this.inform('/apis/node.k8s.io/v1/runtimeclasses', { json: slimRuntimeClass }, {
      add: rc => this.onRuntimeClass(rc), update: (_, rc) => this.onRuntimeClass(rc), delete: rc => this.onRuntimeClass(rc),
    });
    this.synced = true;
    enqueueAll();
    // Level-triggered: a periodic pass catches anything a missed event would hide.
    this.resync = setInterval(enqueueAll, this.settings.resyncSeconds * 1000);
    for (let i = 0; i < this.settings.workers; i++) void this.work();
  }

  private get agentMode(): boolean {
    return this.settings.installMode === 'agent';
  }

  /**
   * Install mode NodeAgent: the Nodes' metadata, the agent pods (readiness) and the cordoned
   * Nodes, composed into the planner's views (agent-node-views.ts says why).
   */
  private async informAgentNodes(onNode: (before?: NodeView, after?: NodeView) => void): Promise<AgentNodeViews> {
    const views = new AgentNodeViews(onNode);
    this.agentViews = views;
    await this.readRequests(views);
    await this.inform<AgentPod>(`/api/v1/namespaces/${this.settings.namespace}/pods`, { json: slimAgentPod, protobuf: agentPodFromProto }, {
      add: p => views.putAgent(p), update: (_, p) => views.putAgent(p), delete: p => views.removeAgent(p.name),
    }, AGENT_POD_SELECTOR);
    await this.inform<string>('/api/v1/nodes', { json: (raw: any) => raw.metadata.name, protobuf: b => objectMeta(b).name, metadataOnly: true }, {
      add: n => views.setCordoned(n, true), delete: n => views.setCordoned(n, false),
    }, undefined, 'spec.unschedulable=true', 'cordoned');
    await this.inform<NodeMetadata>('/api/v1/nodes', { json: slimNodeMetadata, protobuf: nodeMetadataFromProto, fingerprint: nodeFingerprint, metadataOnly: true }, {
      add: n => views.putNode(n),
      update: (_, n) => views.putNode(n),
      delete: n => views.removeNode(n.name),
      unchangedAt: (n, version) => views.nodeSeenAt(n, version),
    });
    // What the agents recorded before this controller started was announced by the one before.
    views.requests.announceFinished((node, shim, name) => {
      const view = views.get(node);
      return view !== undefined && requestsOn(view.annotations).some(r => r.shim === shim && r.admitted.name === name && isRecordedSuccess(r.result));
    });
    return views;
  }

  /**
   * The requests ConfigMaps, read once: this controller is their only writer and keeps its
   * book from here on (request-book.ts). A refused LIST is retried, as an informer's is.
   */
  private async readRequests(views: AgentNodeViews): Promise<void> {
    for (;;) {
      try {
        const list = await this.kube.get(`/api/v1/namespaces/${this.settings.namespace}/configmaps?labelSelector=${encodeURIComponent(REQUESTS_SELECTOR)}`);
        for (const cm of list.items ?? []) {
          const node = cm.metadata?.annotations?.[REQUESTS_NODE_ANNOTATION];
          if (node && requestsConfigMapName(node) === cm.metadata.name) views.requests.seed(node, cm.data ?? {});
        }
        return;
      } catch (e) {
        this.log.warn('could not list the requests ConfigMaps; again in 2 s', { error: (e as Error).message });
        await new Promise(r => setTimeout(r, 2000));
      }
    }
  }

  /**
   * Sets `shim`'s request on a node (`text`), or withdraws it (null; only while the book holds
   * the request `expected`, when given), with the recorded requests that waited for a write.
   * One write at a time per node: each write's patch comes from the book as the writes before
   * it left it (two Shims' passes run at once, and one's withdrawal of a recorded request must
   * not remove the other's new one).
   */
  private async setRequest(node: string, shim: string, text: string | null, expected?: string): Promise<void> {
    const previous = this.requestWrites.get(node) ?? Promise.resolve();
    const write = previous.catch(() => undefined).then(async () => {
      const requests = this.agentViews!.requests;
      if (text === null && expected !== undefined && requests.requestOf(node, shim) !== expected) return;
      const patch = requests.patchFor(node, shim, text);
      if (patch) await this.writeRequests(node, patch);
    });
    this.requestWrites.set(node, write);
    try {
      await write;
    } finally {
      if (this.requestWrites.get(node) === write) this.requestWrites.delete(node);
    }
  }

  /**
   * Writes a node's requests (a data patch from the book): a merge patch of its ConfigMap, or
   * its creation, owned by the Node (it goes with the Node). A node that is gone gets none.
   */
  private async writeRequests(node: string, patch: Record<string, string | null>): Promise<void> {
    const views = this.agentViews!;
    const ns = this.settings.namespace;
    const name = requestsConfigMapName(node);
    const path = `/api/v1/namespaces/${ns}/configmaps/${name}`;
    let done = false;
    if (views.requests.exists(node)) {
      done = await unlessNotFound(this.kube.mergePatch(path, { data: patch }));
    }
    const data = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== null));
    const uid = views.uidOf(node);
    if (!done && Object.keys(data).length > 0) {
      if (!uid) return; // gone
      try {
        await this.kube.create(`/api/v1/namespaces/${ns}/configmaps`, {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: {
            name,
            namespace: ns,
            labels: REQUESTS_LABELS,
            annotations: { [REQUESTS_NODE_ANNOTATION]: node },
            ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node, uid }],
          },
          data,
        });
      } catch (e) {
        if (!isConflictOrExists(e)) throw e;
        await this.kube.mergePatch(path, { data: patch }); // made meanwhile (by an earlier leader)
      }
      done = true;
    }
    views.requests.written(node, patch, done);
    views.requestsChanged(node);
  }

  /**
   * A Shim that goes leaves no trace on the nodes: its requests leave the ConfigMaps (those
   * recorded stay there until the next write otherwise), then its results leave the Nodes
   * (in this order: a request without its result would be run again). Fifty nodes at a time.
   */
  private async withdrawAll(shim: string): Promise<void> {
    const requests = this.agentViews!.requests;
    const key = resultKey(shim);
    const withResult = new Set(this.nodes.list().filter(n => n.annotations[key] !== undefined).map(n => n.name));
    const nodes = [...new Set([...requests.nodesWith(shim), ...withResult])];
    for (let i = 0; i < nodes.length; i += 50) {
      await Promise.all(nodes.slice(i, i + 50).map(async node => {
        await this.setRequest(node, shim, null);
        if (withResult.has(node)) await unlessNotFound(this.kube.mergePatch(`/api/v1/nodes/${node}`, { metadata: { annotations: { [key]: null } } }));
      }));
    }
  }

  /** The installer Jobs and their pods (install mode Jobs). */
  private async informJobs(byAnnotation: (o: any) => void): Promise<void> {
    const ns = this.settings.namespace;
    const managed = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
    // A Job's delete event ends its tombstone; so does the add of a new Job of that name (the
    // delete event may have come before the tombstone was written).
    const forget = (job: any) => this.deletedJobs.delete(job.metadata?.name);
    this.jobs = await this.inform<SlimJob>(`/apis/batch/v1/namespaces/${ns}/jobs`, { json: slimJob, protobuf: jobFromProto, keepsEqual: true }, {
      add: j => { forget(j); byAnnotation(j); }, update: (_, j) => byAnnotation(j), delete: j => { forget(j); byAnnotation(j); },
    }, managed);
    // A pod matters once its kubelet has taken it (startTime: its Job has started) and when it
    // ends. Pending pods are watched too: a kubelet whose containerd an installer restarts can
    // leave its node NotReady and report the running installer's pod as Pending (even when it
    // ended), and a Job whose pod was taken must not look unstarted then (it was deleted as
    // one, seen in the multi-node suite's scenario 2).
    const ended = (pod: SlimPod) => pod.status.containerStatuses?.[0]?.state.terminated !== undefined || ['Succeeded', 'Failed'].includes(pod.status.phase ?? '');
    this.pods = await this.inform<SlimPod>(`/api/v1/namespaces/${ns}/pods`, { json: slimPod, protobuf: podFromProto, keepsEqual: true }, {
      // A pod may arrive already taken, or ended (Pending straight to Failed): its Job waits for its result.
      add: pod => { if (ended(pod) || pod.status.startTime) byAnnotation(pod); },
      update: (before, after) => {
        if (before.status.startTime !== after.status.startTime || ended(before) !== ended(after)) byAnnotation(after);
      },
    }, managed);
  }

  private onRuntimeClass(rc: any): void {
    for (const o of rc.metadata?.ownerReferences ?? []) if (o.kind === 'Shim') this.queue.add(o.name);
    // A Shim waiting for this name (a conflict that went away, or one to adopt).
    for (const s of this.shims.list()) if (s.spec?.runtimeClass?.name === rc.metadata?.name) this.queue.add(s.metadata.name);
  }

  async stop(): Promise<void> {
    if (this.resync) clearInterval(this.resync);
    this.queue.stop();
    for (const informer of this.informers) informer.stop();
  }

  /**
   * A cache that is trusted only after a LIST succeeded: an empty node cache would let a
   * Shim being deleted go while its shim stays on every node (I5). A refused LIST (RBAC, a
   * timeout, a 5xx) is retried; the controller is not ready meanwhile.
   */
  private async inform<T>(path: string,
    read: {
      json: (raw: any) => T; protobuf?: (object: Buffer) => T; fingerprint?: (object: Buffer) => string; metadataOnly?: boolean; keepsEqual?: boolean;
    },
    handlers: Handlers<T>, labelSelector?: string, fieldSelector?: string, metric?: string): Promise<Informer<T>> {
    const resource = metric ?? path.slice(path.lastIndexOf('/') + 1);
    const informer = new Informer<T>(this.kube, {
      path,
      labelSelector,
      fieldSelector,
      transform: read.json,
      decode: read.protobuf,
      fingerprint: read.fingerprint,
      metadataOnly: read.metadataOnly,
      unchanged: read.keepsEqual ? samePlain : undefined,
      onReceived: this.metrics.receivedOn(resource),
      onError: e => this.log.warn('watch failed, restarting', { path, error: String((e as Error)?.message ?? e) }),
    }, handlers);
    this.informers.push(informer);
    await informer.start();
    return informer;
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.next();
      if (key === undefined) return;
      this.metrics.queueDepth.set(this.queue.depth);
      const started = process.hrtime.bigint();
      const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
      const pass = this.passDurations.begin(Date.now());
      try {
        await this.reconcile(key);
        this.queue.forget(key);
        this.metrics.reconciles.inc({ result: 'success' });
        this.metrics.reconcileDuration.observe({ result: 'success' }, seconds());
      } catch (e) {
        const delay = this.queue.retry(key);
        this.metrics.reconciles.inc({ result: 'error' });
        this.metrics.reconcileDuration.observe({ result: 'error' }, seconds());
        this.log.warn('reconcile failed, retrying', { shim: key, error: (e as Error).message, retryInMs: delay });
      } finally {
        pass.end(Date.now());
        this.queue.done(key);
      }
    }
  }

  /** What the caches show of every installer Job, with its own pods (jobs.ts, JobObserver). */
  private observedJobs(): ObservedJob[] {
    if (this.agentMode) return observeRequests(this.nodes.list(), (node, shim, request) => this.agentViews!.requests.announced(node, shim, request));
    return this.jobObserver.observe(this.jobs!.list(), this.pods!.list());
  }

  private runtimeClassViews(shim: ShimObject): RuntimeClassView[] {
    return this.runtimeClasses.list()
      .filter(rc => rc.metadata.name === shim.spec?.runtimeClass?.name
        || (rc.metadata.ownerReferences ?? []).some((o: any) => o.uid === shim.metadata.uid))
      .map(rc => {
        const owners = rc.metadata.ownerReferences ?? [];
        return {
          name: rc.metadata.name,
          handler: rc.handler,
          annotations: rc.metadata.annotations ?? {},
          labels: rc.metadata.labels ?? {},
          shimOwners: owners.filter((o: any) => o.kind === 'Shim' && o.apiVersion?.startsWith('runtime.spinkube.dev/')).map((o: any) => o.uid),
          foreignOwner: owners.some((o: any) => !(o.kind === 'Shim' && o.apiVersion?.startsWith('runtime.spinkube.dev/'))),
          nodeSelector: rc.scheduling?.nodeSelector,
          tolerations: rc.scheduling?.tolerations,
          overhead: rc.overhead,
        };
      });
  }

  async reconcile(name: string): Promise<void> {
    const shim = this.shims.get(name);
    if (!shim) {
      this.metrics.forgetShim(name); // gone: its finalizer was released already
      this.visits.keepOnly(new Set(this.shims.list().map(s => s.metadata.uid)));
      return;
    }
    // One clock reading per pass: the planner judges the Jobs and plans by the same `now`.
    const planning = process.hrtime.bigint();
    const result = planPass({
      shim,
      nodes: this.nodes.list(),
      nodeNamed: n => this.nodes.get(n),
      observed: this.observedJobs(),
      writes: { created: [...this.createdJobs.values()], deleted: [...this.deletedJobs] },
      otherShims: this.shims.list().filter(s => s.metadata.name !== name),
      runtimeClasses: this.runtimeClassViews(shim),
      retry: this.settings.retry,
      now: new Date().toISOString(),
      installMode: this.settings.installMode,
      visits: this.visits,
    });
    this.metrics.planSeconds.inc(Number(process.hrtime.bigint() - planning) / 1e9);
    for (const created of result.settled.created) this.createdJobs.delete(created);
    for (const deleted of result.settled.deleted) this.deletedJobs.delete(deleted);
    const jobs = result.jobs;
    this.metrics.observeJobs(jobs);
    const created: JobRequest[] = [];
    try {
      for (const action of this.agentMode ? this.withRecordedRequests(shim, result.actions, jobs) : result.actions) {
        await this.carryOut(shim, action, jobs);
        if (action.kind === 'createJob') created.push(action.job);
      }
    } finally {
      this.logCreated(name, created);
    }
    if (!result.actions.some(a => a.kind === 'removeFinalizer')
      && (!shim.metadata.deletionTimestamp || (shim.metadata.finalizers ?? []).includes(FINALIZER))) {
      await this.writeStatus(shim, result.status);
    }
    if (result.requeueAfterSeconds !== undefined) this.queue.addAfter(name, result.requeueAfterSeconds * 1000);
    this.metrics.observeRollout(name, result.status);
  }

  /**
   * A Job deleted (a request withdrawn) here: hidden until the cache no longer shows it. One
   * created here and deleted before the cache showed it no longer counts as created: its slot is
   * free at the next pass, not when the overlay expires.
   */
  private deleted(name: string): void {
    this.deletedJobs.add(name);
    this.createdJobs.delete(name);
  }

  /**
   * Install mode NodeAgent: a finished request whose outcome is recorded leaves the ConfigMap
   * without a write of its own (request-book.ts). One whose record this pass writes stays in
   * the planner's view until the node shows that write (the node write names it); one recorded
   * earlier goes at once. A running request that the planner withdraws is withdrawn at once.
   */
  private withRecordedRequests(shim: ShimObject, actions: Action[], views: readonly JobView[]): CarriedAction[] {
    const byName = new Map(views.map(v => [v.name, v]));
    const recordedHere = new Set(actions.filter(a => a.kind === 'writeNode').map(a => (a as Extract<Action, { kind: 'writeNode' }>).node));
    const merged = new Map<string, string[]>(); // node -> requests recorded by its write in this pass
    const rest: CarriedAction[] = [];
    const finished = (view: JobView) => {
      if (recordedHere.has(view.node)) merged.set(view.node, [...merged.get(view.node) ?? [], view.name]);
      else rest.push({ kind: 'recordedRequest', view });
    };
    for (const action of actions) {
      if (action.kind === 'deleteJob') {
        const view = byName.get(action.name);
        if (view && view.phase !== 'running') {
          finished(view);
          continue;
        }
      } else if (action.kind === 'deleteSucceededJobs') {
        const batches = new Set(action.batches);
        for (const view of views.filter(v => v.shimUid === shim.metadata.uid && v.phase === 'succeeded' && batches.has(v.batch ?? ''))) finished(view);
        continue;
      }
      rest.push(action);
    }
    return rest.map(action => (action.kind === 'writeNode' && merged.has(action.node) ? { ...action, records: merged.get(action.node) } : action));
  }

  /**
   * One line per pass and operation, naming every node (a rollout step over thousands of
   * nodes would otherwise write as many lines, each a system call).
   */
  private logCreated(shim: string, jobs: JobRequest[]): void {
    for (const operation of ['install', 'uninstall'] as const) {
      const these = jobs.filter(j => j.operation === operation);
      if (these.length === 0) continue;
      this.log.info('installer jobs created', {
        shim,
        operation,
        handler: these[0].handler,
        count: these.length,
        nodes: these.map(j => (j.attempt > 1 ? `${j.node} (attempt ${j.attempt})` : j.node)),
      });
    }
  }

  private async writeStatus(shim: ShimObject, status: ShimStatus): Promise<void> {
    if (canonical(shim.status ?? {}) === canonical(status)) return; // nothing new: no write
    await this.kube.mergePatch(`${SHIMS}/${shim.metadata.name}/status`, { status });
  }

  /** `views`: the pass's Jobs (in agent mode the requests), read once per pass. */
  private async carryOut(shim: ShimObject, action: CarriedAction, views: readonly JobView[]): Promise<void> {
    const name = shim.metadata.name;
    const rcPath = (rc: string) => `/apis/node.k8s.io/v1/runtimeclasses/${rc}`;
    switch (action.kind) {
      case 'addFinalizer':
      case 'removeFinalizer': {
        if (action.kind === 'removeFinalizer' && this.agentMode) await this.withdrawAll(name);
        const current = shim.metadata.finalizers ?? [];
        const finalizers = action.kind === 'addFinalizer' ? [...current, FINALIZER] : current.filter(f => f !== FINALIZER);
        // resourceVersion guards against overwriting someone else's finalizer change.
        await this.kube.mergePatch(`${SHIMS}/${name}`, { metadata: { finalizers, resourceVersion: shim.metadata.resourceVersion } });
        return;
      }
      case 'createJob': {
        if (this.agentMode) {
          const pacing = { passIntervalMs: this.passIntervalMs(), slowestPassMs: this.passDurations.slowest(Date.now()) };
          const text = JSON.stringify(admittedRequest(this.settings, shim, action.job, new Date().toISOString(), pacing));
          await this.setRequest(action.job.node, name, text);
        } else {
          try {
            await this.kube.create(`/apis/batch/v1/namespaces/${this.settings.namespace}/jobs`, installerJob(this.settings, shim, action.job));
          } catch (e) {
            if (!isConflictOrExists(e)) throw e;
          }
        }
        this.createdJobs.set(action.job.name, { job: action.job, shimUid: shim.metadata.uid, at: new Date().toISOString() });
        // A request admitted again under a name it withdrew (the same attempt, once the node is
        // ready again) is no longer withdrawn: the cache may show the name again before it showed
        // it gone, and must not hide the new admission. (A Job's add event does this in Job mode.)
        if (this.agentMode) this.deletedJobs.delete(action.job.name);
        return;
      }
      case 'deleteJob': {
        if (this.agentMode) {
          // A request under way (its node went away, or another supersedes it): the agent must stop.
          const view = views.find(v => v.name === action.name);
          if (view) await this.setRequest(view.node, name, null, view.name);
          this.deleted(action.name);
          return;
        }
        const path = `/apis/batch/v1/namespaces/${this.settings.namespace}/jobs/${action.name}`;
        if (await unlessNotFound(this.kube.delete(path, { propagationPolicy: 'Background' }))) this.deleted(action.name);
        return;
      }
      case 'deleteSucceededJobs': {
        const uid = shim.metadata.uid;
        const batches = new Set(action.batches);
        const succeeded = this.jobs!.list().filter(j => j.metadata.labels?.[LABEL_SHIM_UID] === uid && batches.has(j.metadata.labels?.[LABEL_BATCH])
          && (j.status?.succeeded ?? 0) > 0);
        const labels = `${LABEL_SHIM_UID}=${uid},${LABEL_BATCH} in (${action.batches.join(',')})`;
        const selector = `labelSelector=${encodeURIComponent(labels)}&fieldSelector=${encodeURIComponent('status.successful=1')}`;
        // Cleanup, not progress: it runs beside the rest of the pass. Removing hundreds of Jobs
        // in one request can outlast the client's timeout on a busy API server (seen at 5,000
        // nodes); waiting for it failed the pass and held the rollout back. The Jobs are hidden
        // from the planner meanwhile (their results are recorded) and shown again if the
        // request fails, so that a later pass removes what is left.
        if (this.cleaning.has(uid)) return;
        this.cleaning.add(uid);
        for (const job of succeeded) this.deletedJobs.add(job.metadata.name);
        void this.kube.deleteCollection(`/apis/batch/v1/namespaces/${this.settings.namespace}/jobs?${selector}`, { propagationPolicy: 'Background' })
          .catch(e => {
            for (const job of succeeded) this.deletedJobs.delete(job.metadata.name);
            this.log.warn('could not remove finished installer Jobs; a later pass retries', { shim: name, jobs: succeeded.length, error: (e as Error).message });
          })
          .finally(() => {
            this.cleaning.delete(uid);
            this.queue.add(name);
          });
        return;
      }
      case 'writeNode': {
        const path = `/api/v1/nodes/${action.node}`;
        const patch = { metadata: { labels: action.labels, annotations: action.annotations } };
        try {
          if (!('records' in action) || !action.records) {
            await this.kube.mergePatch(path, patch);
            return;
          }
          // The requests it records leave the planner's view once the node shows this write.
          const version = await this.kube.mergePatchVersion(path, patch);
          for (const request of action.records) this.agentViews!.requests.recorded(action.node, name, request, version ?? '0');
          this.agentViews!.requestsChanged(action.node);
        } catch (e) {
          if (!isNotFound(e)) throw e; // a node that is gone has nothing left to record
        }
        return;
      }
      case 'recordedRequest':
        // Recorded in an earlier pass (the node shows it): out of the view now, out of the ConfigMap with its next write.
        if (this.agentViews!.requests.recorded(action.view.node, name, action.view.name)) this.agentViews!.requestsChanged(action.view.node);
        return;
      case 'applyRuntimeClass': {
        const rcName = action.object.metadata.name;
        if (action.replace) await unlessNotFound(this.kube.delete(rcPath(rcName)));
        await this.kube.apply(rcPath(rcName), action.object, FIELD_MANAGER);
        if (action.cleanup) await this.kube.mergePatch(rcPath(rcName), action.cleanup);
        return;
      }
      case 'deleteRuntimeClass':
        await unlessNotFound(this.kube.delete(rcPath(action.name)));
        return;
      case 'event':
        if (action.reason === 'Installed') this.metrics.installs.inc({ outcome: 'success' }, action.count ?? 1);
        if (action.reason === 'InstallFailed') this.metrics.installs.inc({ outcome: 'failure' }, action.count ?? 1);
        await this.event(shim, action.type, action.reason, action.message, action.count);
        return;
    }
  }

  private async event(shim: ShimObject, type: string, reason: string, message: string, count = 1): Promise<void> {
    const now = new Date().toISOString();
    try {
      await this.kube.create(`/api/v1/namespaces/${EVENTS_NAMESPACE}/events`, {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${shim.metadata.name}.`, namespace: EVENTS_NAMESPACE },
        involvedObject: { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', name: shim.metadata.name, uid: shim.metadata.uid },
        type,
        reason,
        message: message.slice(0, 1024),
        firstTimestamp: now,
        lastTimestamp: now,
        count,
        source: { component: 'rcm-controller' },
        reportingComponent: 'rcm-controller',
      });
    } catch (e) {
      // An event is worth a log line, not a failed reconcile.
      this.log.warn('could not record an event', { shim: shim.metadata.name, reason, error: (e as Error).message });
    }
    this.log.info(message, { shim: shim.metadata.name, event: reason, type });
  }
}
