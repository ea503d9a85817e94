import * as fs from 'fs';
import { ApiObject, ApiObjectMetadata, Chart, Duration, Lazy } from 'cdk8s';
import * as plus from 'cdk8s-plus-28';
import { Construct } from 'constructs';
import { ArgoCd, SyncWaves } from './argo-cd';
import { InstallMode } from './install-mode';
import { clusterScoped, findUp, validateMetadata, validateTolerations } from './metadata';
import { ContainerdRestart } from './rollout';
import { ShimConstruct, ShimConstructProps } from './shim';
import { ShimDefinition } from './shim-definition';
import { ShimToleration } from './toleration';
import { AGENT_POD_LABELS } from '../shared/agent-protocol';
import { installerEnvNameProblem, isDnsLabel, isDnsSubdomain, isQuantity } from '../shared/validation';

/** Where the published images live. */
const DEFAULT_IMAGE_REGISTRY = 'ghcr.io/runtime-class-manager-cdk8s';

/**
 * This package's version: the images are released with the package and tagged with its
 * version (0.0.0 in a development checkout).
 */
function packageVersion(): string {
  return JSON.parse(fs.readFileSync(findUp('package.json'), 'utf8')).version;
}

/**
 * When the kubelet pulls an image. (Named apart from cdk8s-plus's `ImagePullPolicy`, so that
 * both libraries can be imported side by side.)
 */
export enum PullPolicy {
  /** Always pull. */
  ALWAYS = 'Always',
  /** Pull only when the node does not have the image. */
  IF_NOT_PRESENT = 'IfNotPresent',
  /** Never pull: the image must be on the node. */
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
   * @default '128Mi'
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
   * Create the namespace(s): the installer Jobs' labelled to allow privileged pods, the
   * controller's (when separate) to allow only restricted ones.
   * @default true
   */
  readonly createNamespace?: boolean;
  /**
   * Namespace of the installer Jobs and their pods, which are privileged: apart from the
   * controller's, so that the controller's namespace can enforce the `restricted` Pod
   * Security level and fewer people need rights where privileged pods run. Installer pull
   * secrets (`imagePullSecrets`, a Shim's image pull secrets) must exist there too.
   * @default - the controller's namespace
   */
  readonly installerNamespace?: string;
  /**
   * The registry (and path) both default images are pulled from, the images being
   * `<imageRegistry>/rcm-controller:<imageTag>` and `<imageRegistry>/rcm-node-installer:<imageTag>`.
   *
   * Both images must exist there for the controller and its installers to start. The default
   * registry receives them with each release of this package; until a release has published
   * them, and for a mirror or a private registry, build them from the repository
   * (`images/Dockerfile`), push them, and set this and `imageTag`.
   * @default 'ghcr.io/runtime-class-manager-cdk8s'
   */
  readonly imageRegistry?: string;
  /**
   * The tag of both default images, which must exist in `imageRegistry`.
   *
   * The default is this package's version, the tag its release publishes the images with. A
   * package built from a development checkout says `0.0.0`, which no registry has: set the tag
   * of the images you built and pushed.
   * @default - this package's version (the images are released with it)
   */
  readonly imageTag?: string;
  /**
   * The controller image, in full (overrides `imageRegistry` and `imageTag`).
   * @default '<imageRegistry>/rcm-controller:<imageTag>'
   */
  readonly controllerImage?: string;
  /**
   * The node installer image that the controller's Jobs run, in full (overrides
   * `imageRegistry` and `imageTag`).
   * @default '<imageRegistry>/rcm-node-installer:<imageTag>'
   */
  readonly installerImage?: string;
  /**
   * Pull policy of both images.
   * @default PullPolicy.IF_NOT_PRESENT
   */
  readonly imagePullPolicy?: PullPolicy;
  /**
   * Names of `kubernetes.io/dockerconfigjson` Secrets used to pull both images: the
   * controller pod's and every installer Job's `imagePullSecrets` (so each Secret must exist
   * in the controller's namespace and, when separate, in `installerNamespace`).
   * More with `addImagePullSecret()`.
   * @default - none
   */
  readonly imagePullSecrets?: string[];
  /**
   * Controller replicas (more than one needs leader election).
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
   * Time to live of finished installer Jobs (the cluster's TTL controller, on every supported
   * Kubernetes version). The controller does not
   * rely on it: it removes each finished Job once the result is recorded on the node, and
   * keeps a node's last failed Job for inspection until the next attempt.
   * @default Duration.hours(1)
   */
  readonly jobTtl?: Duration;
  /**
   * Delay before a node whose install or uninstall failed is tried again, doubled after each
   * further failure up to `maxRetryBackoff`.
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
   * limit, as client-go's, which leader election is exempt from).
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
   * @default - requests 50m / 128Mi, limits 500m / 256Mi (measured: about 120 MiB plus 11 MiB per thousand nodes, 175 MiB at 5,000)
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
   * Extra environment variables of every installer pod (and of the node agent, which runs the
   * installer, in install mode NodeAgent), for nodes that differ from the defaults: a proxy (`HTTPS_PROXY`, `NO_PROXY`), or the node installer's own settings such
   * as `RCM_CONFIG`, `RCM_SOCKET`, `RCM_INSTALL_ROOT`, `RCM_DISTRO`. Variables the controller
   * derives from each Shim (`RCM_HANDLER`, `RCM_LOCATION`, `RCM_RESTART`, ...) are refused.
   * @default - none
   */
  readonly installerEnv?: { [name: string]: string };
  /**
   * How operations reach the nodes: an installer Job per node and operation, or a node agent
   * (DaemonSet) that applies every Shim's changes on its node at once and repairs drift.
   * @default InstallMode.jobs()
   */
  readonly installMode?: InstallMode;
  /**
   * Labels of the controller's node: the controller runs only on nodes that carry them.
   * @default { 'kubernetes.io/os': 'linux' }
   */
  readonly nodeSelector?: { [key: string]: string };
  /**
   * Tolerations of the controller pods (not of the installer Jobs: those take each Shim's).
   * @default - none
   */
  readonly tolerations?: ShimToleration[];
  /**
   * The controller pods' affinity, as a Kubernetes `Affinity` object that replaces the default.
   * @see https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#affinity-and-anti-affinity
   * @default - with more than one replica, replicas prefer different nodes
   */
  readonly affinity?: { [key: string]: any };
  /**
   * PriorityClass of the controller pods.
   * @default - none (the cluster's default priority)
   */
  readonly priorityClassName?: string;
  /**
   * Synthesize a PodDisruptionBudget (`policy/v1`) that keeps
   * one replica through voluntary disruptions (drains).
   * @default - true with more than one replica
   */
  readonly podDisruptionBudget?: boolean;
  /**
   * Synthesize a Prometheus Operator `ServiceMonitor` for the metrics Service (needs the
   * monitoring.coreos.com CRDs in the cluster).
   * @default false
   */
  readonly serviceMonitor?: boolean;
  /**
   * Synthesize a NetworkPolicy that lets the controller pods reach only the API server
   * (`apiServerPorts`) and accept only the metrics and probe ports.
   * @default true
   */
  readonly networkPolicy?: boolean;
  /**
   * Ports the API server listens on as the controller pods see them after the Service's
   * address translation (what network policies match): 443 for most managed clusters,
   * 6443 for kubeadm, k3s and kind, 16443 for microk8s.
   * @default [443, 6443]
   */
  readonly apiServerPorts?: number[];
  /**
   * Argo CD sync waves of the objects, and of the Shims added with `addShim()`.
   * @default - ArgoCd's default waves (Namespace -40, CRD -30, controller -20, Shims -10)
   */
  readonly syncWaves?: SyncWaves;
  /**
   * Labels added to every object this construct synthesizes (Shims added with `addShim()`
   * included).
   * @default - none beyond app.kubernetes.io/name, part-of and component
   */
  readonly labels?: { [key: string]: string };
  /**
   * Annotations added to every object this construct synthesizes (Shims added with
   * `addShim()` included).
   * @default - none beyond Argo CD's sync waves
   */
  readonly annotations?: { [key: string]: string };
}

const NAME = 'rcm-controller';
const COMMON_LABELS = {
  'app.kubernetes.io/name': 'runtime-class-manager',
  'app.kubernetes.io/part-of': 'runtime-class-manager',
};
const CONTROLLER_LABELS = { ...COMMON_LABELS, 'app.kubernetes.io/component': 'controller' };
const LINUX = { 'kubernetes.io/os': 'linux' };

/**
 * Everything the runtime-class-manager controller needs in a cluster: the Shim CRD, a namespace, a ServiceAccount with least-privilege RBAC, the controller Deployment, its metrics Service, NetworkPolicy and PodDisruptionBudget, and the `rcm-shim-viewer` / `rcm-shim-editor` ClusterRoles.
 *
 * Shims added with `addShim()` are installed by its controller. One per cluster (and per
 * app). The images it names must exist: see `imageRegistry` and `imageTag`.
 *
 * @example
 * import { App, Chart } from 'cdk8s';
 * import { MaxUpdate, Rollout, RuntimeClassManager } from 'runtime-class-manager-cdk8s';
 *
 * const app = new App();
 * const chart = new Chart(app, 'wasm');
 * const manager = new RuntimeClassManager(chart, 'Manager', {
 *   // Where you pushed the images built from images/Dockerfile, and their tag.
 *   imageRegistry: 'registry.example.com/rcm',
 *   imageTag: '0.1.0',
 * });
 * manager.addShim('spin', {
 *   handler: 'spin',
 *   nodeSelector: { 'spin.example.com/enabled': 'true', 'kubernetes.io/arch': 'amd64' },
 *   location: 'https://github.com/spinframework/containerd-shim-spin/releases/download/v0.25.1/containerd-shim-spin-v2-linux-x86_64.tar.gz',
 *   sha256: '1755fbeb2dec7d026faf8c37031d8a025975f5e194b782da10188206a386d6e4',
 *   rollout: Rollout.rolling({ maxUpdate: MaxUpdate.percent(10) }),
 * });
 * app.synth();
 */
export class RuntimeClassManager extends Construct {
  /** Namespace of the controller. */
  public readonly namespace: string;
  /** Namespace of the installer Jobs (the controller's unless `installerNamespace` is set). */
  public readonly installerNamespace: string;
  /** The controller's ServiceAccount name. */
  public readonly serviceAccountName: string = NAME;
  /** The Shim CRD. */
  public readonly definition: ShimDefinition;
  /** The controller Deployment. */
  public readonly deployment: ApiObject;
  /** The Service in front of the controller's metrics port. */
  public readonly metricsService: ApiObject;
  /** The node agent's DaemonSet (install mode NodeAgent). */
  public readonly nodeAgent?: ApiObject;
  /** The controller image. */
  public readonly controllerImage: string;
  /** The node installer image. */
  public readonly installerImage: string;
  /** The Argo CD sync waves in effect. */
  public readonly syncWaves: SyncWaves;

  private readonly pullSecrets: string[] = [];
  private readonly labels: { [key: string]: string };
  private readonly annotations: { [key: string]: string };
  private readonly installMode: InstallMode;

  constructor(scope: Construct, id: string, props: RuntimeClassManagerProps = {}) {
    super(scope, id);
    // The Chart's namespace, when it has one, is where the controller goes.
    this.namespace = props.namespace ?? Chart.of(this).namespace ?? 'runtime-class-manager';
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
    const apiServerPorts = props.apiServerPorts ?? [443, 6443];
    this.installerNamespace = props.installerNamespace ?? this.namespace;
    validateProps(this.namespace, replicas, leaderElection, metricsPort, probePort, jobTtl);
    if (!isDnsLabel(this.installerNamespace)) {
      throw new Error(`installerNamespace: "${this.installerNamespace}" is not a DNS label (lowercase letters, digits and '-', at most 63 characters)`);
    }
    const separate = this.installerNamespace !== this.namespace;
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
    const resources = {
      cpuRequest: props.resources?.cpuRequest ?? '50m',
      cpuLimit: props.resources?.cpuLimit ?? '500m',
      memoryRequest: props.resources?.memoryRequest ?? '128Mi',
      memoryLimit: props.resources?.memoryLimit ?? '256Mi',
    };
    validateResources(resources);
    const installMode = props.installMode ?? InstallMode.jobs();
    this.installMode = installMode;
    const agent = installMode.agent;
    const agentResources = {
      cpuRequest: agent.cpuRequest ?? '10m',
      cpuLimit: agent.cpuLimit ?? '500m',
      memoryRequest: agent.memoryRequest ?? '96Mi',
      memoryLimit: agent.memoryLimit ?? '512Mi',
    };
    const driftSeconds = (agent.driftCheck ?? Duration.minutes(1)).toSeconds({ integral: false });
    if (installMode.mode === 'agent') {
      validateResources(agentResources, 'installMode.nodeAgent');
      validateTolerations('installMode.nodeAgent.tolerations', agent.tolerations ?? []);
      if (!Number.isInteger(driftSeconds) || driftSeconds < 0) throw new Error(`installMode.nodeAgent.driftCheck: must be a whole number of seconds, got ${driftSeconds}`);
    }
    validateMetadata('labels', props.labels);
    validateMetadata('annotations', props.annotations);
    validateMetadata('labels', props.nodeSelector);
    validateTolerations('tolerations', props.tolerations ?? []);
    if (props.priorityClassName !== undefined && !isDnsSubdomain(props.priorityClassName)) {
      throw new Error(`priorityClassName: "${props.priorityClassName}" is not a DNS subdomain`);
    }
    apiServerPorts.forEach((port, i) => {
      if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`apiServerPorts[${i}]: must be a port number from 1 to 65535, got ${port}`);
    });
    if (props.networkPolicy !== false && apiServerPorts.length === 0) {
      throw new Error('apiServerPorts: the NetworkPolicy needs at least one port (or set networkPolicy: false)');
    }
    const registry = (props.imageRegistry ?? DEFAULT_IMAGE_REGISTRY).replace(/\/+$/, '');
    if (registry.length === 0 || /\s|:[^/]*$|@/.test(registry.replace(/^[^/]*/, ''))) {
      throw new Error(`imageRegistry: "${props.imageRegistry}" is not a registry and path like "registry.example.com/mirror"`);
    }
    const tag = props.imageTag ?? packageVersion();
    if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/.test(tag)) throw new Error(`imageTag: "${tag}" is not an image tag`);
    this.controllerImage = props.controllerImage ?? `${registry}/rcm-controller:${tag}`;
    this.installerImage = props.installerImage ?? `${registry}/rcm-node-installer:${tag}`;
    this.syncWaves = ArgoCd.resolveSyncWaves(props.syncWaves);
    this.labels = { ...props.labels };
    this.annotations = { ...props.annotations };
    for (const secret of props.imagePullSecrets ?? []) this.addImagePullSecret(secret);

    const wave = (w: number | undefined) => ({ ...this.annotations, [ArgoCd.SYNC_WAVE_ANNOTATION]: String(w) });
    if (props.createNamespace ?? true) {
      const namespace = (objectId: string, name: string, level: string) => clusterScoped(ApiObject.of(new plus.Namespace(this, objectId, {
        metadata: {
          name,
          labels: { ...this.labels, ...COMMON_LABELS, 'pod-security.kubernetes.io/enforce': level },
          annotations: wave(this.syncWaves.namespace),
        },
      })));
      // Installer pods are privileged by design (they edit the node's containerd).
      namespace('Namespace', this.namespace, separate ? 'restricted' : 'privileged');
      if (separate) namespace('InstallerNamespace', this.installerNamespace, 'privileged');
    }
    this.definition = new ShimDefinition(this, 'Definition');
    for (const [key, value] of Object.entries({ ...this.labels, ...COMMON_LABELS })) this.definition.resource.metadata.addLabel(key, value);
    for (const [key, value] of Object.entries(wave(this.syncWaves.definition))) this.definition.resource.metadata.addAnnotation(key, value);
    clusterScoped(this.definition.resource);

    const controllerMeta = (name: string, namespaced: boolean) => ({
      name,
      ...(namespaced ? { namespace: this.namespace } : {}),
      labels: { ...this.labels, ...CONTROLLER_LABELS },
      annotations: wave(this.syncWaves.controller),
    });
    const object = (objectId: string, namespaced: boolean, body: any) => {
      const o = new ApiObject(this, objectId, body);
      if (!namespaced) clusterScoped(o);
      return o;
    };

    // The controller reads the API with its token (cdk8s-plus's default is not to mount it).
    const serviceAccount = new plus.ServiceAccount(this, 'ServiceAccount', { metadata: controllerMeta(NAME, true), automountToken: true });
    // An ApiObject: cdk8s-plus renders one rule per API group and resource, which would split the events rule ('' and events.k8s.io) in two.
    object('ClusterRole', false, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: controllerMeta(NAME, false),
      rules: CLUSTER_RULES,
    });
    const clusterRole = plus.ClusterRole.fromClusterRoleName(this, 'ClusterRoleName', NAME);
    bindCluster(this, 'ClusterRoleBinding', controllerMeta(NAME, false), clusterRole, serviceAccount);
    // Jobs and pods where the installers run (in install mode NodeAgent also the nodes'
    // requests ConfigMaps there), the Lease where the controller runs.
    const installerRules = installMode.mode === 'agent' ? [...INSTALLER_RULES, REQUESTS_RULE] : INSTALLER_RULES;
    const roles: [string, string, string, Rule[]][] = separate
      ? [['', NAME, this.namespace, [LEASE_RULE]], ['Installer', `${NAME}-installers`, this.installerNamespace, installerRules]]
      : [['', NAME, this.namespace, [...installerRules, LEASE_RULE]]];
    for (const [prefix, name, namespace, rules] of roles) {
      const metadata = { ...controllerMeta(name, true), namespace };
      const role = new plus.Role(this, `${prefix}Role`, {
        metadata,
        rules: rules.map(r => ({ verbs: r.verbs, resources: [apiResource(r)] })),
      });
      new plus.RoleBinding(this, `${prefix}RoleBinding`, { metadata, role }).addSubjects(serviceAccount);
    }
    // Roles for people: reading Shims joins the cluster's `view` role; writing them is root on
    // every selected node, so the editor role is only ever bound on purpose.
    // An ApiObject: cdk8s-plus renders one rule per resource, which would split the rule on shims and shims/status in two.
    object('ShimViewerRole', false, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: {
        ...controllerMeta('rcm-shim-viewer', false),
        labels: {
          ...controllerMeta('rcm-shim-viewer', false).labels,
          'rbac.authorization.k8s.io/aggregate-to-view': 'true',
          'rbac.authorization.k8s.io/aggregate-to-edit': 'true',
          'rbac.authorization.k8s.io/aggregate-to-admin': 'true',
        },
      },
      rules: [{ apiGroups: ['runtime.spinkube.dev'], resources: ['shims', 'shims/status'], verbs: ['get', 'list', 'watch'] }],
    });
    clusterRoleOf(this, 'ShimEditorRole', controllerMeta('rcm-shim-editor', false), [
      { apiGroup: 'runtime.spinkube.dev', resource: 'shims', verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
      { apiGroup: 'runtime.spinkube.dev', resource: 'shims/status', verbs: ['get', 'list', 'watch'] },
    ]);

    const pullPolicy = props.imagePullPolicy ?? PullPolicy.IF_NOT_PRESENT;
    const staticArgs = [
      `--namespace=${this.namespace}`,
      ...(separate ? [`--installer-namespace=${this.installerNamespace}`] : []),
      `--installer-image=${this.installerImage}`,
      `--installer-image-pull-policy=${pullPolicy}`,
      `--leader-elect=${leaderElection}`,
      `--metrics-bind-address=:${metricsPort}`,
      `--health-probe-bind-address=:${probePort}`,
      `--log-format=${props.logFormat ?? LogFormat.JSON}`,
      `--default-restart-mode=${(props.defaultRestart ?? ContainerdRestart.systemd()).mode}`,
      ...(props.defaultRestart?.restartCommand ? [`--default-restart-command=${props.defaultRestart.restartCommand}`] : []),
      `--job-ttl-seconds=${jobTtl.toSeconds({ integral: false })}`,
      `--lease-duration-seconds=${leaseDuration.toSeconds()}`,
      `--workers=${workers}`,
      `--resync-seconds=${resyncPeriod.toSeconds()}`,
      `--retry-base-seconds=${retryBackoff.toSeconds()}`,
      `--retry-max-seconds=${maxRetryBackoff.toSeconds()}`,
      `--failure-threshold=${failureThreshold}`,
      `--kube-api-qps=${kubeApiQps}`,
      `--kube-api-burst=${kubeApiBurst}`,
      ...installerEnv.map(([name, value]) => `--installer-env=${name}=${value}`),
      ...(installMode.mode === 'agent' ? ['--install-mode=agent'] : []),
    ];
    const args = () => [...staticArgs, ...[...this.pullSecrets].sort().map(name => `--installer-image-pull-secret=${name}`)];
    const podLabels = { ...this.labels, ...CONTROLLER_LABELS };
    const spread = replicas > 1;
    // An ApiObject: a cdk8s-plus Deployment selects on a `cdk8s.io/metadata.addr` label by default, and a
    // selector is immutable (the upgrade of an existing install would be refused); and the pod needs what
    // cdk8s-plus-28 does not expose: priorityClassName, topologySpreadConstraints, `affinity` as given, probes on a named port.
    this.deployment = object('Deployment', true, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: controllerMeta(NAME, true),
      spec: {
        replicas,
        selector: { matchLabels: CONTROLLER_LABELS },
        template: {
          metadata: { labels: podLabels, annotations: props.annotations ? { ...props.annotations } : undefined },
          spec: {
            serviceAccountName: NAME,
            imagePullSecrets: Lazy.any({ produce: () => this.renderPullSecrets() }),
            nodeSelector: { ...(props.nodeSelector ?? LINUX) },
            tolerations: props.tolerations?.map(t => ({ ...t })),
            priorityClassName: props.priorityClassName,
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 65532,
              runAsGroup: 65532,
              seccompProfile: { type: 'RuntimeDefault' },
            },
            terminationGracePeriodSeconds: 30,
            affinity: props.affinity ?? (spread ? {
              podAntiAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [{
                  weight: 100,
                  podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: CONTROLLER_LABELS } },
                }],
              },
            } : undefined),
            // Replicas spread over zones where the nodes say which zone they are in.
            topologySpreadConstraints: spread ? [
              {
                maxSkew: 1,
                topologyKey: 'topology.kubernetes.io/zone',
                whenUnsatisfiable: 'ScheduleAnyway',
                labelSelector: { matchLabels: CONTROLLER_LABELS },
              },
            ] : undefined,
            containers: [{
              name: 'controller',
              image: this.controllerImage,
              imagePullPolicy: pullPolicy,
              args: Lazy.any({ produce: args }),
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
                requests: { cpu: resources.cpuRequest, memory: resources.memoryRequest },
                limits: { cpu: resources.cpuLimit, memory: resources.memoryLimit },
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

    // An ApiObject: the port targets the container port by name ('metrics'), and cdk8s-plus's targetPort is a number.
    this.metricsService = object('MetricsService', true, {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        ...controllerMeta(`${NAME}-metrics`, true),
        labels: { ...controllerMeta(NAME, true).labels, 'app.kubernetes.io/component': 'metrics' },
      },
      spec: {
        type: 'ClusterIP',
        selector: CONTROLLER_LABELS,
        ports: [{ name: 'metrics', port: metricsPort, targetPort: 'metrics', protocol: 'TCP' }],
      },
    });
    if (props.serviceMonitor ?? false) {
      // An ApiObject: a Prometheus Operator custom resource, which cdk8s-plus does not cover.
      object('ServiceMonitor', true, {
        apiVersion: 'monitoring.coreos.com/v1',
        kind: 'ServiceMonitor',
        metadata: {
          ...controllerMeta(NAME, true),
          // The Prometheus Operator's CRD may come later (or from another Application).
          annotations: { ...wave(this.syncWaves.controller), [ArgoCd.SYNC_OPTIONS_ANNOTATION]: ArgoCd.SKIP_DRY_RUN_ON_MISSING_RESOURCE },
        },
        spec: {
          selector: { matchLabels: { ...CONTROLLER_LABELS, 'app.kubernetes.io/component': 'metrics' } },
          namespaceSelector: { matchNames: [this.namespace] },
          endpoints: [{ port: 'metrics', path: '/metrics', interval: '30s' }],
        },
      });
    }
    if (props.podDisruptionBudget ?? spread) {
      // An ApiObject: cdk8s-plus has no PodDisruptionBudget construct.
      object('PodDisruptionBudget', true, {
        apiVersion: 'policy/v1',
        kind: 'PodDisruptionBudget',
        metadata: controllerMeta(NAME, true),
        spec: { minAvailable: 1, selector: { matchLabels: CONTROLLER_LABELS } },
      });
    }
    if (props.networkPolicy ?? true) {
      // An ApiObject: cdk8s-plus's rules always name a peer, and these allow ports from and to any peer (no from/to).
      object('NetworkPolicy', true, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: controllerMeta(NAME, true),
        spec: {
          podSelector: { matchLabels: CONTROLLER_LABELS },
          policyTypes: ['Ingress', 'Egress'],
          // Scrapes and probes only (probes come from the kubelet, which most network
          // plugins let through anyway).
          ingress: [{ ports: [{ protocol: 'TCP', port: metricsPort }, { protocol: 'TCP', port: probePort }] }],
          // The API server only: the controller resolves no names (it dials the in-cluster
          // address it is given) and downloads nothing (the installer pods do, on the host network).
          egress: [{ ports: [...apiServerPorts].sort((a, b) => a - b).map(port => ({ protocol: 'TCP', port })) }],
        },
      });
    }

    if (installMode.mode === 'agent') {
      this.nodeAgent = this.addNodeAgent(object, pullPolicy, agentResources, driftSeconds, agent.tolerations ?? [], wave(this.syncWaves.controller),
        installerEnv.map(([name, value]) => ({ name, value })));
    }

    this.node.addValidation({ validate: () => this.validateSingleManager() });
  }

  /**
   * Pull both images with one more Secret (of type `kubernetes.io/dockerconfigjson`, in the
   * controller's namespace): the controller pod and every installer Job get it.
   * @param secretName the Secret's name
   */
  public addImagePullSecret(secretName: string): void {
    if (!isDnsSubdomain(secretName)) throw new Error(`imagePullSecrets: "${secretName}" is not a DNS subdomain`);
    if (!this.pullSecrets.includes(secretName)) this.pullSecrets.push(secretName);
  }

  /**
   * The node agent (install mode NodeAgent): a ServiceAccount that may read and patch Node
   * objects, and a DaemonSet of the installer image running rcm-node-agent on every Linux
   * node whose taints it tolerates, in the installers' (privileged) namespace.
   */
  private addNodeAgent(object: (id: string, namespaced: boolean, body: any) => ApiObject, pullPolicy: string,
    resources: Required<ControllerResources>, driftSeconds: number, tolerations: ShimToleration[],
    annotations: { [key: string]: string }, installerEnv: { name: string; value: string }[]): ApiObject {
    const name = 'rcm-node-agent';
    // The controller finds the agents by these labels (AGENT_POD_LABELS).
    const selector = { ...COMMON_LABELS, ...AGENT_POD_LABELS };
    const metadata = (namespaced: boolean) => ({
      name,
      ...(namespaced ? { namespace: this.installerNamespace } : {}),
      labels: { ...this.labels, ...selector },
      annotations,
    });
    // The agent patches its Node with its token (cdk8s-plus's default is not to mount it).
    const serviceAccount = new plus.ServiceAccount(this, 'NodeAgentServiceAccount', { metadata: metadata(true), automountToken: true });
    // RBAC cannot narrow this to the agent's own node (see the operator docs for the admission
    // policy that can on Kubernetes 1.30+): it reads its node's requests and writes its results.
    const clusterRole = clusterRoleOf(this, 'NodeAgentClusterRole', metadata(false),
      [{ apiGroup: '', resource: 'nodes', verbs: ['get', 'list', 'watch', 'patch'] }]);
    bindCluster(this, 'NodeAgentClusterRoleBinding', metadata(false), clusterRole, serviceAccount);
    // Its node's requests (a ConfigMap per node in this namespace): read only. RBAC cannot narrow
    // this to its own node's either; the requests say what every node is asked, nothing secret.
    const role = new plus.Role(this, 'NodeAgentRole', {
      metadata: metadata(true),
      rules: [{ verbs: ['get', 'list', 'watch'], resources: [apiResource({ apiGroup: '', resource: 'configmaps', verbs: [] })] }],
    });
    new plus.RoleBinding(this, 'NodeAgentRoleBinding', { metadata: metadata(true), role }).addSubjects(serviceAccount);
    // An ApiObject: a cdk8s-plus DaemonSet selects on a `cdk8s.io/metadata.addr` label by default (a selector is
    // immutable: the upgrade of an existing install would be refused), and the host pod needs what cdk8s-plus-28
    // does not expose: hostPID, priorityClassName, enableServiceLinks.
    return object('NodeAgent', true, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: metadata(true),
      spec: {
        selector: { matchLabels: selector },
        // An agent that restarts changes nothing on its node: a rolling update only replaces the process.
        updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: '10%' } },
        template: {
          metadata: { labels: { ...this.labels, ...selector } },
          spec: {
            serviceAccountName: name,
            imagePullSecrets: Lazy.any({ produce: () => this.renderPullSecrets() }),
            nodeSelector: { ...LINUX },
            tolerations: tolerations.length > 0 ? tolerations.map(t => ({ ...t })) : undefined,
            // Shims are part of the node: the agent is scheduled and kept like its other daemons.
            priorityClassName: 'system-node-critical',
            // The host's processes (nsenter into its init for systemctl), its network (downloads
            // use the node's proxy and DNS), and its / at /host, as an installer Job has them.
            hostPID: true,
            hostNetwork: true,
            dnsPolicy: 'ClusterFirstWithHostNet',
            enableServiceLinks: false,
            // A change in progress is finished before the agent stops (bounded by the health timeout).
            terminationGracePeriodSeconds: 90,
            containers: [{
              name: 'agent',
              image: this.installerImage,
              imagePullPolicy: pullPolicy,
              command: ['/usr/local/bin/node', '/usr/local/lib/rcm/rcm-node-agent.js'],
              args: [`--drift-check-seconds=${driftSeconds}`, '--log-format=json'],
              // installerEnv: the agent runs the installer, so its variables are the agent's.
              env: [
                { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
                { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                ...installerEnv,
              ],
              securityContext: { privileged: true },
              resources: {
                requests: { cpu: resources.cpuRequest, memory: resources.memoryRequest },
                limits: { cpu: resources.cpuLimit, memory: resources.memoryLimit },
              },
              volumeMounts: [{ name: 'host', mountPath: '/host' }],
            }],
            volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }],
          },
        },
      },
    });
  }

  private renderPullSecrets(): { name: string }[] | undefined {
    return this.pullSecrets.length ? [...this.pullSecrets].sort().map(name => ({ name })) : undefined;
  }

  /** The image pull Secrets of the controller and of the installer Jobs. */
  public get imagePullSecrets(): string[] {
    return [...this.pullSecrets];
  }

  /**
   * Add a Shim that this manager's controller installs, in the manager's `shims` sync wave and with the manager's labels and annotations unless `props` says otherwise.
   *
   * Returns the `ShimConstruct`, whose `runWorkload()` puts a workload's pods under the Shim's
   * RuntimeClass.
   *
   * @example
   * import { App, Chart } from 'cdk8s';
   * import { RuntimeClassManager } from 'runtime-class-manager-cdk8s';
   *
   * const app = new App();
   * const chart = new Chart(app, 'wasm');
   * const manager = new RuntimeClassManager(chart, 'Manager', { imageRegistry: 'registry.example.com/rcm', imageTag: '0.1.0' });
   * const spin = manager.addShim('spin', {
   *   handler: 'spin',
   *   runtimeClassName: 'wasmtime-spin-v2',
   *   nodeSelector: { 'spin.example.com/enabled': 'true', 'kubernetes.io/arch': 'amd64' },
   *   location: 'https://github.com/spinframework/containerd-shim-spin/releases/download/v0.25.1/containerd-shim-spin-v2-linux-x86_64.tar.gz',
   *   sha256: '1755fbeb2dec7d026faf8c37031d8a025975f5e194b782da10188206a386d6e4',
   * });
   * // spin.runWorkload(deployment) runs a cdk8s-plus workload's pods under it.
   * app.synth();
   *
   * @param id construct id (also the Shim's name unless `props.name` is set)
   * @param props the Shim
   */
  public addShim(id: string, props: ShimConstructProps): ShimConstruct {
    // The node agent pulls no images: an artifact in one is copied out by a Job's init container.
    if (props.image && this.installMode.mode === 'agent') {
      throw new Error(`addShim("${id}"): image: install mode NodeAgent fetches artifacts over HTTP(S) only; `
        + 'give location or platforms, or use installMode: InstallMode.jobs()');
    }
    return new ShimConstruct(this, id, {
      ...props,
      syncWave: props.syncWave ?? this.syncWaves.shims,
      labels: { ...this.labels, ...props.labels },
      annotations: { ...this.annotations, ...props.annotations },
    });
  }

  private validateSingleManager(): string[] {
    const managers = this.node.root.node.findAll().filter((c): c is RuntimeClassManager => c instanceof RuntimeClassManager);
    if (managers.length > 1 && managers[0] === this) {
      return [`RuntimeClassManager: one per cluster, and this app has ${managers.length} (${managers.map(m => m.node.path).join(', ')}): ` +
        'they would emit the CRD twice, bind one ClusterRole to two ServiceAccounts and run two controllers over the same Shims'];
    }
    return [];
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

/** An RBAC rule as cdk8s-plus renders it: one API group ('' for the core group) and one resource. */
interface Rule {
  readonly apiGroup: string;
  readonly resource: string;
  readonly verbs: string[];
}
const INSTALLER_RULES: Rule[] = [
  // deletecollection: succeeded Jobs go in one request per pass, not one per node.
  { apiGroup: 'batch', resource: 'jobs', verbs: ['get', 'list', 'watch', 'create', 'delete', 'deletecollection'] },
  { apiGroup: '', resource: 'pods', verbs: ['get', 'list', 'watch'] },
];
/** The nodes' requests ConfigMaps (install mode NodeAgent): listed once at start, then written; never watched. */
const REQUESTS_RULE: Rule = { apiGroup: '', resource: 'configmaps', verbs: ['get', 'list', 'create', 'patch'] };
const LEASE_RULE: Rule = { apiGroup: 'coordination.k8s.io', resource: 'leases', verbs: ['get', 'list', 'watch', 'create', 'update'] };

function apiResource(rule: Rule): plus.ApiResource {
  return plus.ApiResource.custom({ apiGroup: rule.apiGroup, resourceType: rule.resource });
}

/** A cluster-scoped ClusterRole with these rules. */
function clusterRoleOf(scope: Construct, id: string, metadata: ApiObjectMetadata, rules: Rule[]): plus.ClusterRole {
  const role = new plus.ClusterRole(scope, id, { metadata, rules: rules.map(r => ({ verbs: r.verbs, endpoints: [apiResource(r)] })) });
  clusterScoped(ApiObject.of(role));
  return role;
}

/** A cluster-scoped ClusterRoleBinding of `role` to `serviceAccount`. */
function bindCluster(scope: Construct, id: string, metadata: ApiObjectMetadata, role: plus.IClusterRole, serviceAccount: plus.ServiceAccount): void {
  const binding = new plus.ClusterRoleBinding(scope, id, { metadata, role });
  binding.addSubjects(serviceAccount);
  clusterScoped(ApiObject.of(binding));
}

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
  const ttl = jobTtl.toSeconds({ integral: false });
  if (!Number.isInteger(ttl) || ttl < 0) {
    throw new Error(`jobTtl: must be a whole number >= 0 of seconds, got ${ttl}`);
  }
}

const SUFFIXES: { [suffix: string]: number } = Object.fromEntries([
  ...['n', 'u', 'm', '', 'k', 'M', 'G', 'T', 'P', 'E'].map((suffix, i) => [suffix, 10 ** (3 * i - 9)]),
  ...['Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'].map((suffix, i) => [suffix, 2 ** (10 * (i + 1))]),
]);

/** A quantity's value (approximate: enough to compare a request with its limit). */
function quantityValue(quantity: string): number {
  const m = /^([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)$/.exec(quantity)!;
  return Number(m[1]) * (m[2] ? 10 ** Number(m[2]) : 1) * (SUFFIXES[m[3]] ?? NaN);
}

function validateResources(r: Required<ControllerResources>, field = 'resources'): void {
  for (const [name, quantity] of Object.entries(r)) {
    if (!isQuantity(quantity)) throw new Error(`${field}.${name}: "${quantity}" is not a Kubernetes quantity`);
    if (quantityValue(quantity) <= 0) throw new Error(`${field}.${name}: must be above zero, got "${quantity}"`);
  }
  for (const kind of ['cpu', 'memory'] as const) {
    const request = r[`${kind}Request`];
    const limit = r[`${kind}Limit`];
    if (quantityValue(request) > quantityValue(limit)) {
      throw new Error(`${field}.${kind}Request: "${request}" is above ${field}.${kind}Limit "${limit}"`);
    }
  }
}
