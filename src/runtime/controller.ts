// The adapter between the planner and the API server: informers feed caches and a work
// queue; a reconcile reads the caches, asks the planner, and carries its actions out. Every
// decision is the planner's; this file only executes typed actions.
import { KubernetesObject, makeInformer } from '@kubernetes/client-node';
import { ANNOTATION_SHIM, installerJob, JobSettings, jobView, LABEL_MANAGED_BY, MANAGED_BY } from './jobs';
import { isConflictOrExists, Kube, unlessNotFound } from './kube';
import { Metrics } from './metrics';
import { FINALIZER, plan } from './planner';
import { WorkQueue } from './queue';
import { canonical } from './runtime-class';
import { Action, JobView, NodeView, RetryPolicy, RuntimeClassView, ShimObject, ShimStatus } from './types';
import { Logger } from '../installer/log';

export const FIELD_MANAGER = 'rcm-controller';
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const EVENTS_NAMESPACE = 'default';

type Cache<T> = { list(): T[]; get(name: string, namespace?: string): T | undefined };

export interface ControllerSettings extends JobSettings {
  readonly workers: number;
  readonly resyncSeconds: number;
  readonly retry: RetryPolicy;
}

export class Controller {
  readonly queue = new WorkQueue();
  private shims!: Cache<ShimObject>;
  private nodes!: Cache<any>;
  private jobs!: Cache<any>;
  private pods!: Cache<any>;
  private runtimeClasses!: Cache<any>;
  private readonly informers: { stop(): Promise<void> }[] = [];
  private resync?: NodeJS.Timeout;
  /**
   * Jobs this controller deleted that the (separately watched) cache may still show: a node
   * event can arrive before the Job's delete event.
   */
  private readonly deletedJobs = new Set<string>();
  private synced = false;

  constructor(private readonly kube: Kube, private readonly settings: ControllerSettings,
    private readonly log: Logger, private readonly metrics: Metrics) {}

  get ready(): boolean {
    return this.synced;
  }

  async start(): Promise<void> {
    const ns = this.settings.namespace;
    const managed = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
    const enqueueAll = () => this.shims?.list().forEach(s => this.queue.add(s.metadata.name));
    const byAnnotation = (o: any) => {
      const shim = o?.metadata?.annotations?.[ANNOTATION_SHIM];
      if (shim) this.queue.add(shim);
    };
    this.shims = await this.watch<ShimObject>(SHIMS, s => this.queue.add(s.metadata.name));
    this.nodes = await this.watch('/api/v1/nodes', enqueueAll);
    // A Job's delete event ends its tombstone; so does the add of a new Job of that name (the
    // delete event may have come before the tombstone was written).
    this.jobs = await this.watch(`/apis/batch/v1/namespaces/${ns}/jobs`, byAnnotation, managed,
      job => this.deletedJobs.delete(job.metadata?.name));
    this.pods = await this.watch(`/api/v1/namespaces/${ns}/pods`, byAnnotation, managed);
    this.runtimeClasses = await this.watch('/apis/node.k8s.io/v1/runtimeclasses', rc => {
      for (const o of rc.metadata?.ownerReferences ?? []) if (o.kind === 'Shim') this.queue.add(o.name);
      // A Shim waiting for this name (a conflict that went away, or one to adopt).
      for (const s of this.shims.list()) if (s.spec?.runtimeClass?.name === rc.metadata?.name) this.queue.add(s.metadata.name);
    });
    this.synced = true;
    enqueueAll();
    // Level-triggered: a periodic pass catches anything a missed event would hide.
    this.resync = setInterval(enqueueAll, this.settings.resyncSeconds * 1000);
    for (let i = 0; i < this.settings.workers; i++) void this.work();
  }

  async stop(): Promise<void> {
    if (this.resync) clearInterval(this.resync);
    this.queue.stop();
    await Promise.all(this.informers.map(i => i.stop().catch(() => undefined)));
  }

  /**
   * An informer whose cache is trusted only after a LIST succeeded: client-node's start()
   * also resolves after a failed LIST, and an empty node cache would let a Shim being
   * deleted go while its shim stays on every node (I5).
   */
  private async watch<T>(path: string, onChange: (o: any) => void, labelSelector?: string, onAddOrDelete?: (o: any) => void): Promise<Cache<T>> {
    let listed!: () => void;
    const synced = new Promise<void>(resolve => (listed = resolve));
    const list = async () => {
      const result = await this.kube.get(`${path}${labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : ''}`);
      listed();
      return result;
    };
    const informer = makeInformer<KubernetesObject>(this.kube.config, path, list as any, labelSelector);
    for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, onChange);
    if (onAddOrDelete) {
      informer.on('delete', onAddOrDelete);
      informer.on('add', onAddOrDelete);
    }
    informer.on('error', (err: any) => {
      // A LIST refused or a watch that expired or broke: list again after a pause (the cache
      // stays usable once it has synced).
      this.log.warn('watch failed, restarting', { path, error: String(err?.message ?? err) });
      setTimeout(() => informer.start().catch(e => this.log.error('restarting a watch failed', { path, error: String(e) })), 2000);
    });
    this.informers.push(informer);
    await informer.start();
    await synced;
    // The informer fills its cache right after our LIST returns: let it.
    await new Promise(resolve => setImmediate(resolve));
    return informer as unknown as Cache<T>;
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.next();
      if (key === undefined) return;
      this.metrics.queueDepth.set(this.queue.depth);
      try {
        await this.reconcile(key);
        this.queue.forget(key);
        this.metrics.reconciles.inc({ result: 'success' });
      } catch (e) {
        const delay = this.queue.retry(key);
        this.metrics.reconciles.inc({ result: 'error' });
        this.log.warn('reconcile failed, retrying', { shim: key, error: (e as Error).message, retryInMs: delay });
      } finally {
        this.queue.done(key);
      }
    }
  }

  private nodeViews(): NodeView[] {
    return this.nodes.list().map(n => ({
      name: n.metadata.name,
      labels: n.metadata.labels ?? {},
      annotations: n.metadata.annotations ?? {},
      ready: (n.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True'),
      schedulable: !n.spec?.unschedulable,
      bootID: n.status?.nodeInfo?.bootID || undefined,
    }));
  }

  /** Every installer Job with its own pods (matched by the Job's uid, not its reusable name). */
  private jobViews(): JobView[] {
    const podsByJob = new Map<string, any[]>();
    for (const pod of this.pods.list()) {
      const uid = pod.metadata?.labels?.['controller-uid'] ?? pod.metadata?.labels?.['batch.kubernetes.io/controller-uid'];
      if (uid) podsByJob.set(uid, [...(podsByJob.get(uid) ?? []), pod]);
    }
    return this.jobs.list()
      .filter(j => !this.deletedJobs.has(j.metadata.name))
      .map(j => jobView(j, podsByJob.get(j.metadata.uid) ?? []))
      .filter((j): j is JobView => j !== undefined);
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
    if (!shim) return; // gone: its finalizer was released already
    const result = plan({
      shim,
      nodes: this.nodeViews(),
      jobs: this.jobViews(),
      otherShims: this.shims.list().filter(s => s.metadata.name !== name),
      runtimeClasses: this.runtimeClassViews(shim),
      retry: this.settings.retry,
      now: new Date().toISOString(),
    });
    for (const action of result.actions) await this.carryOut(shim, action);
    if (!result.actions.some(a => a.kind === 'removeFinalizer')
      && (!shim.metadata.deletionTimestamp || (shim.metadata.finalizers ?? []).includes(FINALIZER))) {
      await this.writeStatus(shim, result.status);
    }
    if (result.requeueAfterSeconds !== undefined) this.queue.addAfter(name, result.requeueAfterSeconds * 1000);
    this.metrics.observeRollout(name, result.status);
  }

  private async writeStatus(shim: ShimObject, status: ShimStatus): Promise<void> {
    if (canonical(shim.status ?? {}) === canonical(status)) return; // nothing new: no write
    await this.kube.mergePatch(`${SHIMS}/${shim.metadata.name}/status`, { status });
  }

  private async carryOut(shim: ShimObject, action: Action): Promise<void> {
    const name = shim.metadata.name;
    const rcPath = (rc: string) => `/apis/node.k8s.io/v1/runtimeclasses/${rc}`;
    switch (action.kind) {
      case 'addFinalizer':
      case 'removeFinalizer': {
        const current = shim.metadata.finalizers ?? [];
        const finalizers = action.kind === 'addFinalizer' ? [...current, FINALIZER] : current.filter(f => f !== FINALIZER);
        // resourceVersion guards against overwriting someone else's finalizer change.
        await this.kube.mergePatch(`${SHIMS}/${name}`, { metadata: { finalizers, resourceVersion: shim.metadata.resourceVersion } });
        return;
      }
      case 'createJob': {
        const job = installerJob(this.settings, shim, action.job);
        try {
          await this.kube.create(`/apis/batch/v1/namespaces/${this.settings.namespace}/jobs`, job);
          this.log.info('installer job created', { shim: name, node: action.job.node, operation: action.job.operation, handler: action.job.handler, attempt: action.job.attempt, job: action.job.name });
        } catch (e) {
          if (!isConflictOrExists(e)) throw e;
        }
        return;
      }
      case 'deleteJob': {
        const path = `/apis/batch/v1/namespaces/${this.settings.namespace}/jobs/${action.name}`;
        if (await unlessNotFound(this.kube.delete(path, { propagationPolicy: 'Background' }))) this.deletedJobs.add(action.name);
        return;
      }
      case 'writeNode':
        // A node that is gone has nothing left to record.
        await unlessNotFound(this.kube.mergePatch(`/api/v1/nodes/${action.node}`, { metadata: { labels: action.labels, annotations: action.annotations } }));
        return;
      case 'applyRuntimeClass': {
        const rcName = action.object.metadata.name;
        if (action.replace) await unlessNotFound(this.kube.delete(rcPath(rcName)));
        await this.kube.apply(rcPath(rcName), action.object, FIELD_MANAGER);
        if (action.dropSelectorKeys.length > 0) {
          const nodeSelector = Object.fromEntries(action.dropSelectorKeys.map(k => [k, null]));
          await this.kube.mergePatch(rcPath(rcName), { scheduling: { nodeSelector } });
        }
        return;
      }
      case 'deleteRuntimeClass':
        await unlessNotFound(this.kube.delete(rcPath(action.name)));
        return;
      case 'event':
        if (action.reason === 'Installed') this.metrics.installs.inc({ outcome: 'success' });
        if (action.reason === 'InstallFailed') this.metrics.installs.inc({ outcome: 'failure' });
        await this.event(shim, action.type, action.reason, action.message);
        return;
    }
  }

  private async event(shim: ShimObject, type: string, reason: string, message: string): Promise<void> {
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
        count: 1,
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
