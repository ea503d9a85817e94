// The installer Job for one node and operation, and what the caches show of one: the facts
// that the planner judges (job-judgement.ts).
// Jobs carry no owner reference: the garbage collector must never delete an uninstall that
// is restarting containerd (foreground deletion of the Shim would); the planner removes them.
import { ObservedInstallerJob } from './job-judgement';
import { runtimeOptionsOf } from './planner';
import { ImageArtifact, JobRequest, ShimObject } from './types';
import { InstallerRequest, POD_HOST_ROOT, toEnv } from '../shared/installer-contract';

export const MANAGED_BY = 'rcm-controller';
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const LABEL_SHIM_UID = 'runtime.spinkube.dev/shim-uid';
export const LABEL_BATCH = 'runtime.spinkube.dev/batch';
export const ANNOTATION_SHIM = 'runtime.spinkube.dev/shim';
export const ANNOTATION_NODE = 'runtime.spinkube.dev/node';
export const ANNOTATION_OPERATION = 'runtime.spinkube.dev/operation';
export const ANNOTATION_REVISION = 'runtime.spinkube.dev/revision';
export const ANNOTATION_HANDLER = 'runtime.spinkube.dev/handler';
export const ANNOTATION_ATTEMPT = 'runtime.spinkube.dev/attempt';
export const ANNOTATION_SHA256 = 'runtime.spinkube.dev/sha256';

export interface JobSettings {
  readonly namespace: string;
  readonly image: string;
  readonly pullPolicy: string;
  readonly ttlSeconds: number;
  readonly defaultRestartMode: string;
  readonly defaultRestartCommand?: string;
  /** Extra variables of every installer pod (--installer-env), e.g. a proxy or a non-standard containerd path. */
  readonly installerEnv?: { name: string; value: string }[];
  /** Pull secrets of every installer pod (for the installer image and artifacts in images). */
  readonly imagePullSecrets?: string[];
}

/** A static busybox in the installer image: it copies an artifact out of an image that may have no shell at all. */
export const COPY_TOOL = '/usr/local/lib/rcm/busybox';
/** Where the installer finds an artifact copied out of an image. */
export const ARTIFACT_FILE = '/rcm-artifact/artifact';

/**
 * No image volume (a feature that needs both the cluster and the runtime to support it): an
 * init container from the artifact's image copies the file into an emptyDir with a static copy tool that a first init
 * container put there from the installer image. The kubelet pulls the image, so digests,
 * pull secrets and the node's registry mirrors apply as for any pod.
 */
function imageCopy(settings: JobSettings, image: ImageArtifact): { initContainers: any[]; volumes: any[] } {
  const minimal = { requests: { cpu: '10m', memory: '16Mi' }, limits: { memory: '64Mi' } };
  const security = { runAsUser: 0, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'], add: ['DAC_READ_SEARCH'] } };
  return {
    initContainers: [
      {
        name: 'copy-tool',
        image: settings.image,
        imagePullPolicy: settings.pullPolicy,
        command: [COPY_TOOL, 'cp', COPY_TOOL, '/rcm-tools/busybox'],
        securityContext: security,
        resources: minimal,
        volumeMounts: [{ name: 'rcm-tools', mountPath: '/rcm-tools' }],
      },
      {
        name: 'artifact',
        image: image.reference,
        command: ['/rcm-tools/busybox', 'cp', '-L', image.path, ARTIFACT_FILE],
        securityContext: security,
        resources: minimal,
        terminationMessagePolicy: 'FallbackToLogsOnError',
        volumeMounts: [{ name: 'rcm-tools', mountPath: '/rcm-tools', readOnly: true }, { name: 'rcm-artifact', mountPath: '/rcm-artifact' }],
      },
    ],
    volumes: [
      { name: 'rcm-tools', emptyDir: { sizeLimit: '16Mi' } },
      { name: 'rcm-artifact', emptyDir: { sizeLimit: '1Gi' } },
    ],
  };
}

export function installerJob(settings: JobSettings, shim: ShimObject, request: JobRequest): any {
  const { name, node, operation, artifact } = request;
  const spec = shim.spec;
  // The cluster-wide extras first: the request's own variables come after them and win (the
  // reserved names are refused at start already).
  const env = [...settings.installerEnv ?? [], ...toEnv(installerRequest(settings, shim, request))];

  const labels = { [LABEL_MANAGED_BY]: MANAGED_BY, [LABEL_SHIM_UID]: shim.metadata.uid, [LABEL_BATCH]: request.batch };
  const annotations = {
    [ANNOTATION_SHIM]: shim.metadata.name,
    [ANNOTATION_NODE]: node,
    [ANNOTATION_OPERATION]: operation,
    [ANNOTATION_HANDLER]: request.handler,
    [ANNOTATION_REVISION]: request.revision,
    [ANNOTATION_ATTEMPT]: String(request.attempt),
    ...(artifact?.sha256 ? { [ANNOTATION_SHA256]: artifact.sha256 } : {}),
  };
  const copy = artifact?.image ? imageCopy(settings, artifact.image) : undefined;
  const pullSecrets = [...new Set([...settings.imagePullSecrets ?? [], ...artifact?.image?.pullSecrets ?? []])];
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: settings.namespace,
      labels,
      annotations,
    },
    spec: {
      // One pod per attempt: the controller retries with its own backoff and records each
      // attempt on the node, so a failure is seen (and counted) as soon as it happens.
      backoffLimit: 0,
      activeDeadlineSeconds: 900,
      ttlSecondsAfterFinished: settings.ttlSeconds,
      template: {
        metadata: { labels, annotations },
        spec: {
          nodeName: node,
          restartPolicy: 'Never',
          hostPID: true,
          // The node's own network: an install must not depend on the pod network (CNI may be
          // what is broken or not ready yet), and downloads use the node's proxy and DNS.
          hostNetwork: true,
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          tolerations: spec.runtimeClass?.tolerations ?? [],
          ...(pullSecrets.length > 0 ? { imagePullSecrets: pullSecrets.map(secret => ({ name: secret })) } : {}),
          ...(copy ? { initContainers: copy.initContainers } : {}),
          containers: [{
            name: 'installer',
            image: settings.image,
            imagePullPolicy: settings.pullPolicy,
            args: [operation],
            env,
            securityContext: { privileged: true },
            terminationMessagePolicy: 'FallbackToLogsOnError',
            volumeMounts: [{ name: 'host', mountPath: POD_HOST_ROOT }, ...(copy ? [{ name: 'rcm-artifact', mountPath: '/rcm-artifact', readOnly: true }] : [])],
            resources: { requests: { cpu: '10m', memory: '64Mi' }, limits: { memory: '512Mi' } },
          }],
          volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }, ...copy?.volumes ?? []],
        },
      },
    },
  };
}

/**
 * What the installer is asked to do on the node. An uninstall names the handler the node
 * recorded, not the one the spec says today, and carries nothing of the handler's shape.
 */
export function installerRequest(settings: JobSettings, shim: ShimObject, request: JobRequest): InstallerRequest {
  const spec = shim.spec;
  const restart = spec.restart ?? { mode: settings.defaultRestartMode, command: settings.defaultRestartCommand };
  const { artifact } = request;
  const base: InstallerRequest = {
    command: request.operation,
    handler: request.handler,
    restart: restart.mode,
    restartCommand: restart.command,
    location: artifact?.location,
    ...(artifact?.image ? { artifactFile: ARTIFACT_FILE, artifactOrigin: `${artifact.image.reference}:${artifact.image.path}` } : {}),
    sha256: artifact?.sha256,
  };
  if (request.operation !== 'install') return base;
  const options = runtimeOptionsOf(spec);
  const handler = spec.containerdRuntime ?? {};
  return {
    ...base,
    runtimeOptions: Object.keys(options).length > 0 ? options : undefined,
    payloadShim: spec.payload?.shim,
    runtimeType: spec.payload?.runtimeType,
    podAnnotations: handler.podAnnotations?.length ? handler.podAnnotations : undefined,
    containerAnnotations: handler.containerAnnotations?.length ? handler.containerAnnotations : undefined,
    privilegedWithoutHostDevices: handler.privilegedWithoutHostDevices,
    snapshotter: handler.snapshotter || undefined,
  };
}

function podEnded(pod: any): boolean {
  return pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded';
}

/**
 * A Job and its own pods (matched by the Job's uid) as the caches show them: the facts the
 * planner judges (job-judgement.ts). Undefined for a Job that does not say what it is.
 */
export function observeJob(job: any, pods: any[]): ObservedInstallerJob | undefined {
  const a = job.metadata?.annotations ?? {};
  const shimUid = job.metadata?.labels?.[LABEL_SHIM_UID];
  if (!a[ANNOTATION_NODE] || !a[ANNOTATION_OPERATION] || !a[ANNOTATION_HANDLER] || !shimUid) return undefined;
  const failed = (job.status?.conditions ?? []).find((c: any) => c.type === 'Failed' && c.status === 'True');
  // The newest terminated container tells why (or what) it ended.
  const terminated = pods
    .map(p => p.status?.containerStatuses?.[0]?.state?.terminated)
    .filter(Boolean)
    .sort((x: any, y: any) => String(x.finishedAt ?? '').localeCompare(String(y.finishedAt ?? '')));
  const last = terminated[terminated.length - 1];
  const waiting = pods.map(p => p.status?.containerStatuses?.[0]?.state?.waiting).find(w => w?.reason);
  return {
    kind: 'job',
    name: job.metadata.name,
    shimUid,
    node: a[ANNOTATION_NODE],
    operation: a[ANNOTATION_OPERATION],
    handler: a[ANNOTATION_HANDLER],
    revision: a[ANNOTATION_REVISION] ?? '',
    ...(a[ANNOTATION_SHA256] ? { sha256: a[ANNOTATION_SHA256] } : {}),
    attempt: Number(a[ANNOTATION_ATTEMPT] ?? 1) || 1,
    ...(job.metadata?.labels?.[LABEL_BATCH] ? { batch: job.metadata.labels[LABEL_BATCH] } : {}),
    ...(failed ? { failed: { reason: failed.reason, message: failed.message, at: failed.lastTransitionTime } } : {}),
    succeeded: (job.status?.succeeded ?? 0) > 0,
    ...(job.status?.completionTime != null ? { completedAt: job.status.completionTime } : {}),
    ...(job.metadata?.creationTimestamp ? { createdAt: job.metadata.creationTimestamp } : {}),
    ...(last ? { terminated: { message: last.message, finishedAt: last.finishedAt } } : {}),
    pods: pods.length,
    podsEnded: pods.filter(podEnded).length,
    ...(waiting ? { waiting: { reason: waiting.reason, message: waiting.message } } : {}),
    // Started once a kubelet has taken a pod (it sets startTime before any container runs, and
    // it stays when a kubelet reports the pod Pending again).
    started: pods.some(p => p.status?.startTime !== undefined || (p.status?.phase !== undefined && p.status.phase !== 'Pending')),
  };
}

const NO_PODS: readonly object[] = [];

/**
 * Every installer Job the caches show, observed with its own pods (matched by the Job's uid,
 * not its reusable name), remembering the facts of each Job object with the pod objects they
 * came from. Every pass of every Shim observes every Job, and the caches keep an object until
 * something the controller reads in it changes: at 5,000 nodes most Jobs of a pass were
 * observed, unchanged, by the pass before.
 */
export class JobObserver<J extends { metadata: { uid: string } }, P extends { metadata?: { labels?: Record<string, string> } }> {
  private readonly known = new WeakMap<J, { pods: readonly P[]; facts: ObservedInstallerJob | undefined }>();

  observe(jobs: readonly J[], pods: readonly P[]): ObservedInstallerJob[] {
    const podsByJob = new Map<string, P[]>();
    for (const pod of pods) {
      const uid = pod.metadata?.labels?.['controller-uid'] ?? pod.metadata?.labels?.['batch.kubernetes.io/controller-uid'];
      if (!uid) continue;
      const own = podsByJob.get(uid);
      if (own) own.push(pod);
      else podsByJob.set(uid, [pod]);
    }
    const observed: ObservedInstallerJob[] = [];
    for (const job of jobs) {
      const own = podsByJob.get(job.metadata.uid) ?? (NO_PODS as readonly P[]);
      let entry = this.known.get(job);
      if (!entry || !sameObjects(entry.pods, own)) this.known.set(job, entry = { pods: own, facts: observeJob(job, own as P[]) });
      if (entry.facts) observed.push(entry.facts);
    }
    return observed;
  }
}

function sameObjects(a: readonly object[], b: readonly object[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
