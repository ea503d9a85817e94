// The adapter between the planner and the API server: informers feed caches and a work
// queue; a reconcile reads the caches, asks the planner, and carries its actions out.
import { KubernetesObject, makeInformer } from '@kubernetes/client-node';
import {
  ANNOTATION_NODE, ANNOTATION_OPERATION, ANNOTATION_SHIM, installerJob, JobSettings, jobView,
  LABEL_MANAGED_BY, LABEL_SHIM_UID, MANAGED_BY, ownerReference,
} from './jobs';
import { isConflictOrExists, Kube, unlessNotFound } from './kube';
import { Metrics } from './metrics';
import { FINALIZER, jobName, plan } from './planner';
import { WorkQueue } from './queue';
import { Action, NodeView, ShimObject } from './types';
import { ShimNodeLabels } from '../constructs/node-labels';
import { Logger } from '../installer/log';

export const FIELD_MANAGER = 'rcm-controller';
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const EVENTS_NAMESPACE = 'default';

/** JSON with sorted keys: the API server returns objects with its own key order. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (v && typeof v === 'object' && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).sort(([a], [b]) => (a < b ? -1 : 1)))
    : v));
}

type Cache<T> = { list(): T[]; get(name: string, namespace?: string): T | undefined };

export interface ControllerSettings extends JobSettings {
  readonly workers: number;
  readonly resyncSeconds: number;
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
      const owner = (rc.metadata?.ownerReferences ?? []).find((o: any) => o.kind === 'Shim');
      if (owner) this.queue.add(owner.name);
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

  private async watch<T>(path: string, onChange: (o: any) => void, labelSelector?: string, onAddOrDelete?: (o: any) => void): Promise<Cache<T>> {
    const list = () => this.kube.get(`${path}${labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : ''}`);
    const informer = makeInformer<KubernetesObject>(this.kube.config, path, list as any, labelSelector);
    for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, onChange);
    if (onAddOrDelete) {
      informer.on('delete', onAddOrDelete);
      informer.on('add', onAddOrDelete);
    }
    informer.on('error', (err: any) => {
      // A watch that expired or broke: list again after a pause (the cache stays usable).
      this.log.warn('watch failed, restarting', { path, error: String(err?.message ?? err) });
      setTimeout(() => informer.start().catch(e => this.log.error('restarting a watch failed', { path, error: String(e) })), 2000);
    });
    await informer.start();
    this.informers.push(informer);
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
      taints: n.spec?.taints ?? [],
    }));
  }

  async reconcile(name: string): Promise<void> {
    const shim = this.shims.get(name);
    if (!shim) return; // gone: its finalizer was released already
    const podsByJob = new Map<string, any[]>();
    for (const pod of this.pods.list()) {
      const job = pod.metadata?.labels?.['job-name'];
      if (job) podsByJob.set(job, [...(podsByJob.get(job) ?? []), pod]);
    }
    const jobs = this.jobsOf(shim)
      .map(j => jobView(j, podsByJob.get(j.metadata.name) ?? []))
      .filter((j): j is NonNullable<typeof j> => j !== undefined);
    const result = plan({
      shim,
      nodes: this.nodeViews(),
      jobs,
      otherShims: this.shims.list().filter(s => s.metadata.name !== name),
      now: new Date().toISOString(),
    });
    for (const action of result.actions) await this.carryOut(shim, action);
    if (!shim.metadata.deletionTimestamp || (shim.metadata.finalizers ?? []).includes(FINALIZER)) {
      if (!result.actions.some(a => a.kind === 'removeFinalizer')) await this.writeStatus(shim, result.status);
    }
    this.metrics.observeRollout(name, result.status);
  }

  private async deleteJobs(shim: ShimObject, node: string, operation?: string): Promise<void> {
    const jobs = this.jobsOf(shim).filter(j => j.metadata.annotations?.[ANNOTATION_NODE] === node
      && (!operation || j.metadata.annotations?.[ANNOTATION_OPERATION] === operation));
    for (const job of jobs) {
      const path = `/apis/batch/v1/namespaces/${this.settings.namespace}/jobs/${job.metadata.name}`;
      if (await unlessNotFound(this.kube.delete(path, { propagationPolicy: 'Background' }))) this.deletedJobs.add(job.metadata.name);
    }
  }

  private jobsOf(shim: ShimObject): any[] {
    return this.jobs.list().filter(j => j.metadata?.labels?.[LABEL_SHIM_UID] === shim.metadata.uid && !this.deletedJobs.has(j.metadata.name));
  }

  private async writeStatus(shim: ShimObject, status: any): Promise<void> {
    if (canonical(shim.status ?? {}) === canonical(status)) return; // nothing new: no write
    await this.kube.mergePatch(`${SHIMS}/${shim.metadata.name}/status`, { status });
  }

  private async carryOut(shim: ShimObject, action: Action): Promise<void> {
    const name = shim.metadata.name;
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
        const jobId = jobName(name, action.node, action.operation, action.revision);
        const job = installerJob(this.settings, shim, jobId, action.node, action.operation, action.revision, action.artifact);
        try {
          await this.kube.create(`/apis/batch/v1/namespaces/${this.settings.namespace}/jobs`, job);
          this.log.info('installer job created', { shim: name, node: action.node, operation: action.operation, job: job.metadata.name });
        } catch (e) {
          if (!isConflictOrExists(e)) throw e;
        }
        return;
      }
      case 'setNodeState':
        await this.kube.mergePatch(`/api/v1/nodes/${action.node}`, {
          metadata: {
            labels: { [ShimNodeLabels.stateKey(name)]: action.state },
            ...(action.revision ? { annotations: { [ShimNodeLabels.revisionKey(name)]: action.revision } } : {}),
          },
        });
        if (action.state === ShimNodeLabels.PROVISIONED) {
          this.metrics.installs.inc({ outcome: 'success' });
          // The label now records the success: the Job and its pod would only weigh on the
          // caches (thousands of them in a large rollout). Failed Jobs stay for inspection.
          await this.deleteJobs(shim, action.node, 'install');
        }
        if (action.state === ShimNodeLabels.FAILED) this.metrics.installs.inc({ outcome: 'failure' });
        return;
      case 'clearNode':
        await unlessNotFound(this.kube.mergePatch(`/api/v1/nodes/${action.node}`, {
          metadata: { labels: { [ShimNodeLabels.stateKey(name)]: null }, annotations: { [ShimNodeLabels.revisionKey(name)]: null } },
        }));
        // The node's finished Jobs describe a past that the uninstall ended: should the node
        // be selected again, a fresh install must run under the same (deterministic) name.
        await this.deleteJobs(shim, action.node);
        return;
      case 'applyRuntimeClass':
        await this.applyRuntimeClass(shim);
        return;
      case 'deleteRuntimeClass': {
        const rcName = shim.spec?.runtimeClass?.name;
        const rc = rcName ? this.runtimeClasses.get(rcName) : undefined;
        const ours = (rc?.metadata?.ownerReferences ?? []).some((o: any) => o.uid === shim.metadata.uid);
        if (rc && ours) await unlessNotFound(this.kube.delete(`/apis/node.k8s.io/v1/runtimeclasses/${rcName}`));
        return;
      }
      case 'event':
        await this.event(shim, action.type, action.reason, action.message);
        return;
    }
  }

  private desiredRuntimeClass(shim: ShimObject): any {
    const rc = shim.spec.runtimeClass;
    return {
      apiVersion: 'node.k8s.io/v1',
      kind: 'RuntimeClass',
      metadata: {
        name: rc.name,
        ownerReferences: [ownerReference(shim)],
      },
      handler: rc.handler,
      scheduling: {
        nodeSelector: { [ShimNodeLabels.stateKey(shim.metadata.name)]: ShimNodeLabels.PROVISIONED },
        ...(rc.tolerations ? { tolerations: rc.tolerations } : {}),
      },
      ...(rc.overhead ? { overhead: rc.overhead } : {}),
    };
  }

  private async applyRuntimeClass(shim: ShimObject): Promise<void> {
    const desired = this.desiredRuntimeClass(shim);
    const existing = this.runtimeClasses.get(desired.metadata.name);
    if (existing && existing.handler !== desired.handler) {
      // The handler of a RuntimeClass is immutable: replace the object.
      await this.kube.delete(`/apis/node.k8s.io/v1/runtimeclasses/${desired.metadata.name}`);
    } else if (existing && this.owns(existing, desired)) {
      return; // already in shape: no write
    }
    await this.kube.apply(`/apis/node.k8s.io/v1/runtimeclasses/${desired.metadata.name}`, desired, FIELD_MANAGER);
    // Apply cannot take away keys another manager added to the node selector, and a selector
    // that asks for more than the provisioned label would keep pods off ready nodes.
    const foreign = Object.keys(existing?.scheduling?.nodeSelector ?? {}).filter(k => !(k in desired.scheduling.nodeSelector));
    if (foreign.length > 0) {
      await this.kube.mergePatch(`/apis/node.k8s.io/v1/runtimeclasses/${desired.metadata.name}`,
        { scheduling: { nodeSelector: Object.fromEntries(foreign.map(k => [k, null])) } });
    }
  }

  /** The existing object already holds every field we would apply. */
  private owns(existing: any, desired: any): boolean {
    const same = (a: unknown, b: unknown) => canonical(a ?? null) === canonical(b ?? null);
    const ownerOk = (existing.metadata.ownerReferences ?? []).some((o: any) => o.uid === desired.metadata.ownerReferences[0].uid);
    return ownerOk && same(existing.handler, desired.handler) && same(existing.scheduling?.nodeSelector, desired.scheduling.nodeSelector)
      && same(existing.scheduling?.tolerations, desired.scheduling.tolerations) && same(existing.overhead, desired.overhead);
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
