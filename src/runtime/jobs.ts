// The installer Job for one node and operation, and the way back from a Job to a JobView.
import { runtimeOptionsOf } from './planner';
import { JobView, Operation, ShimObject } from './types';

export const MANAGED_BY = 'rcm-controller';
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const LABEL_SHIM_UID = 'runtime.spinkube.dev/shim-uid';
export const ANNOTATION_SHIM = 'runtime.spinkube.dev/shim';
export const ANNOTATION_NODE = 'runtime.spinkube.dev/node';
export const ANNOTATION_OPERATION = 'runtime.spinkube.dev/operation';
export const ANNOTATION_REVISION = 'runtime.spinkube.dev/revision';

export interface JobSettings {
  readonly namespace: string;
  readonly image: string;
  readonly pullPolicy: string;
  readonly ttlSeconds: number;
  readonly defaultRestartMode: string;
  readonly defaultRestartCommand?: string;
  /** Extra variables of every installer pod (--installer-env), e.g. a proxy or a non-standard containerd path. */
  readonly installerEnv?: { name: string; value: string }[];
}

/** The Shim as the controlling owner: the garbage collector removes what it owns with it. */
export function ownerReference(shim: ShimObject): object {
  return { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', name: shim.metadata.name, uid: shim.metadata.uid, controller: true, blockOwnerDeletion: true };
}

export function installerJob(settings: JobSettings, shim: ShimObject, name: string, node: string, operation: Operation,
  revision: string, artifact?: { location: string; sha256?: string }): any {
  const spec = shim.spec ?? {};
  const restart = spec.restart ?? { mode: settings.defaultRestartMode, command: settings.defaultRestartCommand };
  const env: { name: string; value: string }[] = [
    { name: 'RCM_HOST_ROOT', value: '/host' },
    { name: 'RCM_HANDLER', value: spec.runtimeClass.handler },
    { name: 'RCM_RESTART', value: restart.mode },
    { name: 'RCM_JSON_LOGS', value: 'true' },
  ];
  if (restart.command) env.push({ name: 'RCM_RESTART_COMMAND', value: restart.command });
  if (artifact) {
    env.push({ name: 'RCM_LOCATION', value: artifact.location });
    if (artifact.sha256) env.push({ name: 'RCM_SHA256', value: artifact.sha256 });
  }
  env.push(...settings.installerEnv ?? []);
  const options = Object.entries(runtimeOptionsOf(spec)).map(([k, v]) => `${k}=${v}`);
  if (options.length > 0) env.push({ name: 'RCM_RUNTIME_OPTION', value: options.join('\n') });

  const labels = { [LABEL_MANAGED_BY]: MANAGED_BY, [LABEL_SHIM_UID]: shim.metadata.uid };
  const annotations = {
    [ANNOTATION_SHIM]: shim.metadata.name, [ANNOTATION_NODE]: node, [ANNOTATION_OPERATION]: operation, [ANNOTATION_REVISION]: revision,
  };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: settings.namespace,
      labels,
      annotations,
      ownerReferences: [ownerReference(shim)],
    },
    spec: {
      backoffLimit: 2,
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
          containers: [{
            name: 'installer',
            image: settings.image,
            imagePullPolicy: settings.pullPolicy,
            args: [operation],
            env,
            securityContext: { privileged: true },
            terminationMessagePolicy: 'FallbackToLogsOnError',
            volumeMounts: [{ name: 'host', mountPath: '/host' }],
            resources: { requests: { cpu: '10m', memory: '64Mi' }, limits: { memory: '512Mi' } },
          }],
          volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }],
        },
      },
    },
  };
}

function parseResult(message: string | undefined): JobView['result'] {
  if (!message) return undefined;
  try {
    const r = JSON.parse(message);
    return { reason: r.reason, message: r.message, outcome: r.outcome };
  } catch {
    return { reason: 'InstallerFailed', message: message.trim().split('\n').slice(-3).join(' ').slice(0, 500) };
  }
}

/** A Job and its pods as the planner sees them. */
export function jobView(job: any, pods: any[]): JobView | undefined {
  const a = job.metadata?.annotations ?? {};
  if (!a[ANNOTATION_NODE] || !a[ANNOTATION_OPERATION]) return undefined;
  const failed = (job.status?.conditions ?? []).some((c: any) => c.type === 'Failed' && c.status === 'True');
  const succeeded = (job.status?.succeeded ?? 0) > 0;
  // The newest terminated container tells why (or what) it ended.
  const terminated = pods
    .map(p => p.status?.containerStatuses?.[0]?.state?.terminated)
    .filter(Boolean)
    .sort((x: any, y: any) => String(x.finishedAt ?? '').localeCompare(String(y.finishedAt ?? '')));
  const last = terminated[terminated.length - 1];
  return {
    name: job.metadata.name,
    node: a[ANNOTATION_NODE],
    operation: a[ANNOTATION_OPERATION],
    revision: a[ANNOTATION_REVISION],
    phase: succeeded ? 'succeeded' : failed ? 'failed' : 'running',
    result: parseResult(last?.message),
  };
}
