import { ApiObject, Duration } from 'cdk8s';
import { Construct } from 'constructs';
import { SYNC_WAVE_ANNOTATION, SyncWave } from './argo-cd';
import { ContainerdRestart } from './rollout';
import { ShimConstruct, ShimConstructProps } from './shim';
import { ShimDefinition } from './shim-definition';
import { installerEnvNameProblem, isDnsLabel } from '../shared/validation';

/** Pinned default images; bumped with each release of this library. */
const DEFAULT_CONTROLLER_IMAGE = 'ghcr.io/runtime-class-manager-cdk8s/rcm-controller:0.1.0';
const DEFAULT_INSTALLER_IMAGE = 'ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:0.1.0';

/** When the kubelet pulls an image. */
export enum ImagePullPolicy {
  /** Always pull. */
  ALWAYS = 'Always',
  /** Pull only when the node does not have the image. */
  IF_NOT_PRESENT = 'IfNotPresent',
  /** Never pull; the image must be on the node. */
  NEVER = 'Never',
}

/** The controller's log format. */
export enum LogFormat {
  /** One JSON object per line. */
  JSON = 'json',
  /** Human-readable text. */
  TEXT = 'text',
}

/** CPU and memory of the controller container. */
export interface ControllerResources {
  /**
   * CPU request.
   * @default '50m'
   */
  readonly cpuRequest?: string;
  /**
   * CPU limit.
   * @default '500m'
   */
  readonly cpuLimit?: string;
  /**
   * Memory request.
   * @default '64Mi'
   */
  readonly memoryRequest?: string;
  /**
   * Memory limit.
   * @default '256Mi'
   */
  readonly memoryLimit?: string;
}

/** Props of a `RuntimeClassManager`. */
export interface RuntimeClassManagerProps {
  /**
   * Namespace of the controller and of its installer Jobs.
   * @default 'runtime-class-manager'
   */
  readonly namespace?: string;
  /**
   * Create the namespace (labelled to allow the privileged installer pods).
   * @default true
   */
  readonly createNamespace?: boolean;
  /**
   * The controller image.
   * @default 'ghcr.io/runtime-class-manager-cdk8s/rcm-controller:0.1.0'
   */
  readonly controllerImage?: string;
  /**
   * The node installer image that the controller's Jobs run.
   * @default 'ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:0.1.0'
   */
  readonly installerImage?: string;
  /**
   * Pull policy of both images.
   * @default ImagePullPolicy.IF_NOT_PRESENT
   */
  readonly imagePullPolicy?: ImagePullPolicy;
  /**
   * Controller replicas; more than one needs leader election.
   * @default 2
   */
  readonly replicas?: number;
  /**
   * Elect one active replica through a coordination.k8s.io Lease.
   * @default true
   */
  readonly leaderElection?: boolean;
  /**
   * Port of the Prometheus `/metrics` endpoint.
   * @default 8080
   */
  readonly metricsPort?: number;
  /**
   * Port of the `/healthz` and `/readyz` endpoints.
   * @default 8081
   */
  readonly probePort?: number;
  /**
   * The controller's log format.
   * @default LogFormat.JSON
   */
  readonly logFormat?: LogFormat;
  /**
   * How installers restart containerd when a Shim does not say.
   * @default ContainerdRestart.systemd()
   */
  readonly defaultRestart?: ContainerdRestart;
  /**
   * Time to live of finished installer Jobs where the cluster's TTL controller runs
   * (Kubernetes 1.23 and later; alpha and off on older versions). The controller does not
   * rely on it: it removes each finished Job once the result is recorded on the node, and
   * keeps a node's last failed Job for inspection until the next attempt.
   * @default Duration.hours(1)
   */
  readonly jobTtl?: Duration;
  /**
   * Delay before a node whose install or uninstall failed is tried again; doubled after each
   * further failure, up to `maxRetryBackoff`.
   * @default Duration.seconds(30)
   */
  readonly retryBackoff?: Duration;
  /**
   * The longest delay between two attempts on a failing node.
   * @default Duration.minutes(15)
   */
  readonly maxRetryBackoff?: Duration;
  /**
   * Failed attempts after which a node counts as failed: the Shim turns Degraded and its
   * rollout stops (the node itself is still retried at `maxRetryBackoff`).
   * @default 3
   */
  readonly failureThreshold?: number;
  /**
   * Sustained requests per second from the controller to the API server (a client-side rate
   * limit, as client-go's; leader election is not limited).
   * @default 50
   */
  readonly kubeApiQps?: number;
  /**
   * Requests the controller may send in a burst above `kubeApiQps`.
   * @default 100
   */
  readonly kubeApiBurst?: number;
  /**
   * CPU and memory of the controller container.
   * @default - requests 50m / 64Mi, limits 500m / 256Mi
   */
  readonly resources?: ControllerResources;
  /**
   * How long a leader holds its Lease without renewing (fail-over time).
   * @default Duration.seconds(15)
   */
  readonly leaseDuration?: Duration;
  /**
   * Shims reconciled in parallel.
   * @default 4
   */
  readonly workers?: number;
  /**
   * Period of the full resync of every Shim.
   * @default Duration.seconds(30)
   */
  readonly resyncPeriod?: Duration;
  /**
   * Extra environment variables of every installer pod, for nodes that differ from the
   * defaults: a proxy (`HTTPS_PROXY`, `NO_PROXY`), or the node installer's own settings such
   * as `RCM_CONFIG`, `RCM_SOCKET`, `RCM_INSTALL_ROOT`, `RCM_DISTRO`. Variables the controller
   * derives from each Shim (`RCM_HANDLER`, `RCM_LOCATION`, `RCM_RESTART`, ...) are refused.
   * @default - none
   */
  readonly installerEnv?: { [name: string]: string };
}

const NAME = 'rcm-controller';
const COMMON_LABELS = {
  'app.kubernetes.io/name': 'runtime-class-manager',
  'app.kubernetes.io/part-of': 'runtime-class-manager',
};
const CONTROLLER_LABELS = { ...COMMON_LABELS, 'app.kubernetes.io/component': 'controller' };

/**
 * Everything the runtime-class-manager controller needs in a cluster: the Shim CRD, a
 * namespace, a ServiceAccount with least-privilege RBAC, and the controller Deployment.
 * Shims added with `addShim()` are installed by it.
 */
export class RuntimeClassManager extends Construct {
  /** Namespace of the controller and its installer Jobs. */
  public readonly namespace: string;
  /** The controller's ServiceAccount name. */
  public readonly serviceAccountName: string = NAME;
  /** The Shim CRD. */
  public readonly definition: ShimDefinition;
  /** The controller Deployment. */
  public readonly deployment: ApiObject;

  constructor(scope: Construct, id: string, props: RuntimeClassManagerProps = {}) {
    super(scope, id);
    this.namespace = props.namespace ?? 'runtime-class-manager';
    const replicas = props.replicas ?? 2;
    const leaderElection = props.leaderElection ?? true;
    const metricsPort = props.metricsPort ?? 8080;
    const probePort = props.probePort ?? 8081;
    const jobTtl = props.jobTtl ?? Duration.hours(1);
    const leaseDuration = props.leaseDuration ?? Duration.seconds(15);
    const workers = props.workers ?? 4;
    const resyncPeriod = props.resyncPeriod ?? Duration.seconds(30);
    const retryBackoff = props.retryBackoff ?? Duration.seconds(30);
    const maxRetryBackoff = props.maxRetryBackoff ?? Duration.minutes(15);
    const failureThreshold = props.failureThreshold ?? 3;
    const kubeApiQps = props.kubeApiQps ?? 50;
    const kubeApiBurst = props.kubeApiBurst ?? 100;
    validateProps(this.namespace, replicas, leaderElection, metricsPort, probePort, jobTtl);
    const installerEnv = Object.entries(props.installerEnv ?? {});
    for (const [name, value] of installerEnv) {
      const problem = installerEnvNameProblem(name);
      if (problem) throw new Error(`installerEnv: ${problem}`);
      if (value.includes('\n')) throw new Error(`installerEnv: the value of ${name} must be one line`);
    }
    const wholeSeconds = (d: Duration) => d.toSeconds({ integral: false });
    for (const [field, value] of [
      ['leaseDuration', wholeSeconds(leaseDuration)], ['resyncPeriod', wholeSeconds(resyncPeriod)], ['workers', workers],
      ['retryBackoff', wholeSeconds(retryBackoff)], ['maxRetryBackoff', wholeSeconds(maxRetryBackoff)], ['failureThreshold', failureThreshold],
      ['kubeApiQps', kubeApiQps], ['kubeApiBurst', kubeApiBurst],
    ] as const) {
      const unit = ['workers', 'failureThreshold', 'kubeApiQps', 'kubeApiBurst'].includes(field) ? '' : ' of seconds';
      if (!Number.isInteger(value) || value < 1) throw new Error(`${field}: must be a whole number >= 1${unit}, got ${value}`);
    }
    if (wholeSeconds(maxRetryBackoff) < wholeSeconds(retryBackoff)) {
      throw new Error(`maxRetryBackoff: must not be shorter than retryBackoff (${wholeSeconds(retryBackoff)} seconds), got ${wholeSeconds(maxRetryBackoff)} seconds`);
    }

    if (props.createNamespace ?? true) {
      new ApiObject(this, 'Namespace', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: {
          name: this.namespace,
          labels: {
            ...COMMON_LABELS,
            // Installer pods are privileged by design (they edit the node's containerd).
            'pod-security.kubernetes.io/enforce': 'privileged',
          },
          annotations: { [SYNC_WAVE_ANNOTATION]: SyncWave.NAMESPACE },
        },
      });
    }
    this.definition = new ShimDefinition(this, 'Definition');

    const controllerMeta = (name: string, namespaced: boolean) => ({
      name,
      ...(namespaced ? { namespace: this.namespace } : {}),
      labels: CONTROLLER_LABELS,
      annotations: { [SYNC_WAVE_ANNOTATION]: SyncWave.CONTROLLER },
    });

    new ApiObject(this, 'ServiceAccount', {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: controllerMeta(NAME, true),
    });
    new ApiObject(this, 'ClusterRole', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: controllerMeta(NAME, false),
      rules: CLUSTER_RULES,
    });
    new ApiObject(this, 'ClusterRoleBinding', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: controllerMeta(NAME, false),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NAME },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: this.namespace }],
    });
    new ApiObject(this, 'Role', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: controllerMeta(NAME, true),
      rules: NAMESPACE_RULES,
    });
    new ApiObject(this, 'RoleBinding', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: controllerMeta(NAME, true),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: NAME },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: this.namespace }],
    });

    const pullPolicy = props.imagePullPolicy ?? ImagePullPolicy.IF_NOT_PRESENT;
    const resources = props.resources ?? {};
    const args = [
      `--namespace=${this.namespace}`,
      `--installer-image=${props.installerImage ?? DEFAULT_INSTALLER_IMAGE}`,
      `--installer-image-pull-policy=${pullPolicy}`,
      `--leader-elect=${leaderElection}`,
      `--metrics-bind-address=:${metricsPort}`,
      `--health-probe-bind-address=:${probePort}`,
      `--log-format=${props.logFormat ?? LogFormat.JSON}`,
      `--default-restart-mode=${(props.defaultRestart ?? ContainerdRestart.systemd()).mode}`,
      ...(props.defaultRestart?.restartCommand ? [`--default-restart-command=${props.defaultRestart.restartCommand}`] : []),
      `--job-ttl-seconds=${jobTtl.toSeconds()}`,
      `--lease-duration-seconds=${leaseDuration.toSeconds()}`,
      `--workers=${workers}`,
      `--resync-seconds=${resyncPeriod.toSeconds()}`,
      `--retry-base-seconds=${retryBackoff.toSeconds()}`,
      `--retry-max-seconds=${maxRetryBackoff.toSeconds()}`,
      `--failure-threshold=${failureThreshold}`,
      `--kube-api-qps=${kubeApiQps}`,
      `--kube-api-burst=${kubeApiBurst}`,
      ...installerEnv.map(([name, value]) => `--installer-env=${name}=${value}`),
    ];
    this.deployment = new ApiObject(this, 'Deployment', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: controllerMeta(NAME, true),
      spec: {
        replicas,
        selector: { matchLabels: CONTROLLER_LABELS },
        template: {
          metadata: { labels: CONTROLLER_LABELS },
          spec: {
            serviceAccountName: NAME,
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 65532,
              runAsGroup: 65532,
              seccompProfile: { type: 'RuntimeDefault' },
            },
            terminationGracePeriodSeconds: 30,
            affinity: replicas > 1 ? {
              podAntiAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [{
                  weight: 100,
                  podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: CONTROLLER_LABELS } },
                }],
              },
            } : undefined,
            containers: [{
              name: 'controller',
              image: props.controllerImage ?? DEFAULT_CONTROLLER_IMAGE,
              imagePullPolicy: pullPolicy,
              args,
              env: [
                { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              ],
              ports: [
                { name: 'metrics', containerPort: metricsPort, protocol: 'TCP' },
                { name: 'probes', containerPort: probePort, protocol: 'TCP' },
              ],
              livenessProbe: { httpGet: { path: '/healthz', port: 'probes' }, initialDelaySeconds: 5, periodSeconds: 10 },
              readinessProbe: { httpGet: { path: '/readyz', port: 'probes' }, initialDelaySeconds: 2, periodSeconds: 5 },
              resources: {
                requests: { cpu: resources.cpuRequest ?? '50m', memory: resources.memoryRequest ?? '64Mi' },
                limits: { cpu: resources.cpuLimit ?? '500m', memory: resources.memoryLimit ?? '256Mi' },
              },
              securityContext: {
                allowPrivilegeEscalation: false,
                readOnlyRootFilesystem: true,
                privileged: false,
                runAsNonRoot: true,
                capabilities: { drop: ['ALL'] },
              },
            }],
          },
        },
      },
    });
  }

  /**
   * Add a Shim that this manager's controller installs.
   * @param id construct id (also the Shim's name unless `props.name` is set)
   * @param props the Shim
   */
  public addShim(id: string, props: ShimConstructProps): ShimConstruct {
    return new ShimConstruct(this, id, props);
  }
}

// Least privilege: exactly what the controller does, nothing more (no secrets, no pods
// outside its namespace, no deletion of nodes).
const CLUSTER_RULES = [
  { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
  { apiGroups: ['runtime.spinkube.dev'], resources: ['shims'], verbs: ['get', 'list', 'watch', 'update', 'patch'] },
  { apiGroups: ['runtime.spinkube.dev'], resources: ['shims/status'], verbs: ['get', 'update', 'patch'] },
  { apiGroups: ['runtime.spinkube.dev'], resources: ['shims/finalizers'], verbs: ['update'] },
  { apiGroups: ['node.k8s.io'], resources: ['runtimeclasses'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
  // Events about a cluster-scoped Shim go to the default namespace.
  { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
];
const NAMESPACE_RULES = [
  // deletecollection: succeeded Jobs go in one request per pass, not one per node.
  { apiGroups: ['batch'], resources: ['jobs'], verbs: ['get', 'list', 'watch', 'create', 'delete', 'deletecollection'] },
  { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'list', 'watch', 'create', 'update'] },
];

function validateProps(namespace: string, replicas: number, leaderElection: boolean,
  metricsPort: number, probePort: number, jobTtl: Duration): void {
  if (!isDnsLabel(namespace)) {
    throw new Error(`namespace: "${namespace}" is not a DNS label (lowercase letters, digits and '-', at most 63 characters)`);
  }
  if (!Number.isInteger(replicas) || replicas < 1) {
    throw new Error(`replicas: must be a whole number >= 1, got ${replicas}`);
  }
  if (replicas > 1 && !leaderElection) {
    throw new Error(`replicas: ${replicas} replicas need leaderElection (two active controllers would fight)`);
  }
  for (const [field, port] of [['metricsPort', metricsPort], ['probePort', probePort]] as const) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`${field}: must be a port number from 1 to 65535, got ${port}`);
    }
  }
  if (metricsPort === probePort) {
    throw new Error(`probePort: must differ from metricsPort (both ${probePort})`);
  }
  if (jobTtl.toSeconds() < 0) {
    throw new Error(`jobTtl: must not be negative, got ${jobTtl.toSeconds()} seconds`);
  }
}
