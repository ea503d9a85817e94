import { ApiObject, JsonPatch, Lazy } from 'cdk8s';
import { Construct, IConstruct, Node } from 'constructs';
import { ArgoCd } from './argo-cd';
import { clusterScoped, validateMetadata, validateTolerations } from './metadata';
import { ContainerdRestart, Rollout } from './rollout';
import { ContainerdHandlerSettings, ShimPayload } from './runtime-payload';
import { ShimToleration } from './toleration';
import {
  Shim, ShimSpec, ShimSpecRolloutStrategyRollingMaxUpdate,
  ShimSpecRuntimeClassOverheadPodFixed,
} from '../../imports/runtime.spinkube.dev';
import { ShimNodeLabels } from '../shared/node-labels';

/** The labels of every Shim (those the manager's other objects carry, and the component). */
const SHIM_LABELS = {
  'app.kubernetes.io/name': 'runtime-class-manager',
  'app.kubernetes.io/part-of': 'runtime-class-manager',
  'app.kubernetes.io/component': 'shim',
};
import { artifactUrlProblem, isAnnotationGlob, isDnsLabel, isDnsSubdomain, isPlatformArch, isPlatformOs, isQuantity, isRuntimeType, isSha256, isSnapshotterName, nodeArch, runtimeOptionProblem } from '../shared/validation';

/** A shim artifact for one node platform. */
export interface ShimPlatformArtifact {
  /**
   * Node operating system, as in the node's `kubernetes.io/os` label.
   * @example 'linux'
   */
  readonly os: string;
  /**
   * Node architecture, as in the node's `kubernetes.io/arch` label (`x86_64` and `aarch64`, the upstream Shim's names, mean `amd64` and `arm64`).
   * @example 'arm64'
   */
  readonly arch: string;
  /** URL of a `.tar.gz` holding `containerd-shim-<name>-v<N>`, or of the bare binary. */
  readonly location: string;
  /**
   * Expected sha256 of the artifact (64 lowercase hex digits).
   * @default - not verified; the node installer warns loudly
   */
  readonly sha256?: string;
}

/**
 * A shim artifact inside a container image: the kubelet pulls the image on each node (so
 * digests, private registries and the node's mirrors work as for any pod) and the installer
 * takes the file at `path` from it.
 */
export interface ShimImageArtifact {
  /**
   * The image, by tag or (recommended) pinned by digest.
   * @example 'ghcr.io/example/gvisor-payload@sha256:0123...'
   */
  readonly reference: string;
  /**
   * Absolute path of the artifact (a `.tar.gz` or a bare shim binary) inside the image.
   * @example '/payload/gvisor.tar.gz'
   */
  readonly path: string;
  /**
   * Expected sha256 of the file at `path` (64 lowercase hex digits).
   * @default - the file is not verified beyond the image digest
   */
  readonly sha256?: string;
  /**
   * Secrets (in the controller's namespace) for pulling the image.
   * @default - the controller's installer pull secrets only
   */
  readonly imagePullSecrets?: string[];
}

/** Props of a `ShimConstruct`. */
export interface ShimConstructProps {
  /**
   * Name of the Shim object (a DNS label).
   * @default - the construct id
   */
  readonly name?: string;
  /**
   * The runtime handler: the name of the runtime in containerd's config and in the
   * RuntimeClass (a DNS label), for example `spin`.
   */
  readonly handler: string;
  /**
   * Name of the RuntimeClass that pods reference in `runtimeClassName` (a DNS subdomain).
   * @default - the Shim's name
   */
  readonly runtimeClassName?: string;
  /**
   * URL of the artifact for nodes that no entry of `platforms` matches.
   * @default - none: every node must match an entry of `platforms`
   */
  readonly location?: string;
  /**
   * Expected sha256 of the artifact at `location` (64 lowercase hex digits).
   * @default - not verified; the node installer warns loudly
   */
  readonly sha256?: string;
  /**
   * Per-platform artifacts, matched on the node's os and arch labels.
   * @default - only `location`
   */
  readonly platforms?: ShimPlatformArtifact[];
  /**
   * The artifact inside a container image instead of at an HTTP(S) location (not together
   * with `location` or `platforms`).
   * @default - downloaded from `location` or `platforms`
   */
  readonly image?: ShimImageArtifact;
  /**
   * The artifact is a payload of several files installed as one folder, rather than one
   * shim binary.
   * @default - a single shim binary
   */
  readonly payload?: ShimPayload;
  /**
   * containerd's handler-level fields (pod and container annotations, host devices of
   * privileged pods, snapshotter).
   * @default - containerd's defaults
   */
  readonly containerdRuntime?: ContainerdHandlerSettings;
  /**
   * Annotations the runtime needs on every pod it runs: `runWorkload()` puts them on the
   * workload's pod template beside `runtimeClassName`, so that no workload can forget them.
   * crun runs a container as a Wasm module only with `module.wasm.image/variant: compat`
   * (or `run.oci.handler: wasm`). containerd passes a pod's annotations to the runtime only
   * where the handler lets them through, so each key must match a glob of
   * `containerdRuntime.podAnnotations`. Where a workload sets one of these keys itself, the
   * Shim's value wins.
   * @example { 'module.wasm.image/variant': 'compat' }
   * @default - none
   */
  readonly workloadAnnotations?: { [key: string]: string };
  /**
   * Accept `http://` artifact locations. Without TLS anyone on the path can replace the
   * shim, so pair it with `sha256`.
   * @default false
   */
  readonly allowInsecureHttp?: boolean;
  /**
   * Labels a node must carry to get the shim.
   * @default - all nodes
   */
  readonly nodeSelector?: { [key: string]: string };
  /**
   * How the shim is rolled out over the selected nodes.
   * @default Rollout.recreate()
   */
  readonly rollout?: Rollout;
  /**
   * Options written under the handler's `options` table in containerd's config.
   * @default - none
   */
  readonly runtimeOptions?: { [key: string]: string };
  /**
   * How the node installer restarts containerd.
   * @default - the controller's default restart mode
   */
  readonly restart?: ContainerdRestart;
  /**
   * Fixed resources a pod of this RuntimeClass uses beyond its containers, as quantities
   * (for example `{ memory: '64Mi', cpu: '50m' }`).
   * @see https://kubernetes.io/docs/concepts/scheduling-eviction/pod-overhead/
   * @default - none
   */
  readonly overhead?: { [resource: string]: string };
  /**
   * Tolerations for pods of this RuntimeClass and for the installer Jobs, so that tainted
   * nodes meant to run the shim can receive it.
   * @default - none
   */
  readonly tolerations?: ShimToleration[];
  /**
   * Synthesize the RuntimeClass too, rather than leave it to the controller.
   *
   * The controller creates the RuntimeClass from the Shim's `spec.runtimeClass` either way
   * (with the overhead, tolerations, labels and annotations given here) and replaces it when
   * the handler changes, at the moment no pod can be sent to a node without the new handler.
   * A synthesized copy gets in the way of that: a RuntimeClass's handler is immutable, so the
   * apply that carries a new handler is refused on the RuntimeClass (the Shim in the same
   * apply does change). Then wait until the controller has replaced the RuntimeClass
   * (`kubectl get runtimeclass <name> -o jsonpath='{.handler}'` shows the new handler) and
   * apply again. Set it only where a tool must see the RuntimeClass in the manifests.
   * @default false
   */
  readonly createRuntimeClass?: boolean;
  /**
   * Labels of the Shim and its RuntimeClass (the RuntimeClass gets them through
   * `spec.runtimeClass.labels`). The Shim also carries `app.kubernetes.io/name` and
   * `app.kubernetes.io/part-of: runtime-class-manager` and `app.kubernetes.io/component: shim`,
   * as the manager's other objects do.
   * @default - none beyond those
   */
  readonly labels?: { [key: string]: string };
  /**
   * Annotations of the Shim and its RuntimeClass (the RuntimeClass gets them through
   * `spec.runtimeClass.annotations`, less the `argocd.argoproj.io/` and `runtime.spinkube.dev/`
   * keys, which mean nothing on an object the controller writes).
   * @default - none beyond Argo CD's sync wave and options
   */
  readonly annotations?: { [key: string]: string };
  /**
   * Argo CD sync wave of the Shim and its RuntimeClass.
   * @default - the `shims` wave of the RuntimeClassManager that adds it, else ArgoCd.DEFAULT_SHIMS_WAVE
   */
  readonly syncWave?: number;
}


/**
 * One Shim custom resource: a containerd shim that the controller installs on the selected nodes and exposes through a RuntimeClass.
 *
 * The controller creates the RuntimeClass, which schedules pods only onto nodes where the
 * controller has recorded the handler as installed (`createRuntimeClass` synthesizes it here
 * too). `RuntimeClassManager.addShim()` is the usual way to make one.
 *
 * @example
 * import { App, Chart } from 'cdk8s';
 * import { RuntimeClassManager, ShimConstruct } from 'runtime-class-manager-cdk8s';
 *
 * const app = new App();
 * const chart = new Chart(app, 'wasm');
 * new RuntimeClassManager(chart, 'Manager', { imageRegistry: 'registry.example.com/rcm', imageTag: '0.1.0' });
 * // A Shim on its own (addShim() also gives it the manager's sync wave, labels and annotations).
 * new ShimConstruct(chart, 'spin', {
 *   handler: 'spin',
 *   runtimeClassName: 'wasmtime-spin-v2',
 *   nodeSelector: { 'spin.example.com/enabled': 'true', 'kubernetes.io/arch': 'amd64' },
 *   platforms: [{
 *     os: 'linux',
 *     arch: 'amd64',
 *     location: 'https://github.com/spinframework/containerd-shim-spin/releases/download/v0.25.1/containerd-shim-spin-v2-linux-x86_64.tar.gz',
 *     sha256: '1755fbeb2dec7d026faf8c37031d8a025975f5e194b782da10188206a386d6e4',
 *   }],
 * });
 * app.synth();
 */
export class ShimConstruct extends Construct {
  /** The Shim object's name. */
  public readonly name: string;
  /** The runtime handler. */
  public readonly handler: string;
  /** The RuntimeClass name, for a pod's `runtimeClassName` (see also `runWorkload()`). */
  public readonly runtimeClassName: string;
  /** The Shim object. */
  public readonly resource: ApiObject;
  /**
   * The RuntimeClass object.
   * @default - undefined unless `createRuntimeClass` is true (the controller creates it)
   */
  public readonly runtimeClass?: ApiObject;

  private readonly platforms: ShimPlatformArtifact[] = [];
  private readonly allowInsecureHttp: boolean;
  private readonly location?: string;
  private readonly image?: ShimImageArtifact;
  private readonly podAnnotations: { [key: string]: string };

  constructor(scope: Construct, id: string, props: ShimConstructProps) {
    super(scope, id);
    this.name = props.name ?? id;
    this.handler = props.handler;
    this.runtimeClassName = props.runtimeClassName ?? this.name;
    validateProps(this.name, this.runtimeClassName, props);
    const syncWave = String(props.syncWave ?? ArgoCd.DEFAULT_SHIMS_WAVE);
    this.allowInsecureHttp = props.allowInsecureHttp ?? false;
    this.location = props.location;
    this.image = props.image;
    this.podAnnotations = { ...props.workloadAnnotations };
    for (const platform of props.platforms ?? []) this.addPlatform(platform);

    const spec: ShimSpec = {
      nodeSelector: props.nodeSelector,
      // The upstream runtime-class-manager's shape: platforms beside anonHttp. `type` is
      // deprecated there but kept, so that older controllers read the output too.
      fetchStrategy: {
        type: 'anonymousHttp',
        anonHttp: props.location !== undefined ? { location: props.location, sha256: props.sha256 } : undefined,
        platforms: Lazy.any({ produce: () => this.renderPlatforms() }) as any,
        image: props.image ? {
          reference: props.image.reference,
          path: props.image.path,
          sha256: props.image.sha256,
          imagePullSecrets: props.image.imagePullSecrets?.map(name => ({ name })),
        } : undefined,
      },
      payload: props.payload ? { shim: props.payload.shim, runtimeType: props.payload.runtimeType } : undefined,
      containerdRuntime: props.containerdRuntime ? { ...props.containerdRuntime } : undefined,
      runtimeClass: {
        name: this.runtimeClassName,
        handler: this.handler,
        labels: props.labels && Object.keys(props.labels).length > 0 ? { ...props.labels } : undefined,
        annotations: runtimeClassAnnotations(props.annotations),
        overhead: props.overhead ? { podFixed: mapValues(props.overhead, ShimSpecRuntimeClassOverheadPodFixed.fromString) } : undefined,
        // Operators and effects were checked against the same enums above.
        tolerations: props.tolerations?.map(t => ({ ...t })) as any,
      },
      rolloutStrategy: rolloutSpec(props.rollout ?? Rollout.recreate()),
      containerdRuntimeOptions: props.runtimeOptions,
      restart: props.restart?._toKube() as any,
    };
    // The class generated from the CRD (imports/): cdk8s-plus knows only built-in kinds.
    this.resource = new Shim(this, 'Resource', {
      metadata: {
        name: this.name,
        // The labels every object of the manager has, so that `kubectl apply --prune -l` and
        // selection by label take the Shims too; the user's own beside them.
        labels: { ...props.labels, ...SHIM_LABELS },
        annotations: {
          ...props.annotations,
          [ArgoCd.SYNC_WAVE_ANNOTATION]: syncWave,
          [ArgoCd.SYNC_OPTIONS_ANNOTATION]: ArgoCd.SKIP_DRY_RUN_ON_MISSING_RESOURCE,
        },
      },
      spec,
    });
    clusterScoped(this.resource);

    // By default the controller alone writes the RuntimeClass: it can replace it on a handler
    // change, which an apply of a synthesized one cannot (its handler is immutable).
    if (props.createRuntimeClass ?? false) {
      // An ApiObject: cdk8s-plus has no RuntimeClass construct.
      this.runtimeClass = new ApiObject(this, 'RuntimeClass', {
        apiVersion: 'node.k8s.io/v1',
        kind: 'RuntimeClass',
        metadata: {
          name: this.runtimeClassName,
          labels: { ...props.labels, 'app.kubernetes.io/managed-by': 'runtime-class-manager' },
          // The controller adopts this RuntimeClass (and only a RuntimeClass that says so).
          annotations: { ...props.annotations, [ArgoCd.SYNC_WAVE_ANNOTATION]: syncWave, [ShimNodeLabels.ADOPT_ANNOTATION]: this.name },
        },
        handler: this.handler,
        scheduling: {
          // Pods land only where the controller has recorded this handler as installed, not
          // merely where the Shim's nodeSelector matches.
          nodeSelector: { [ShimNodeLabels.handlerKey(this.name)]: this.handler },
          tolerations: props.tolerations?.map(t => ({ ...t })),
        },
        overhead: props.overhead ? { podFixed: { ...props.overhead } } : undefined,
      });
      clusterScoped(this.runtimeClass);
    }

    this.node.addValidation({ validate: () => this.validateUniqueness() });
  }

  /**
   * Add an artifact for one more node platform.
   * @param artifact the platform and where its artifact is
   */
  public addPlatform(artifact: ShimPlatformArtifact): void {
    validatePlatform(artifact, this.platforms.length, this.allowInsecureHttp);
    const same = (arch: string) => nodeArch(arch) === nodeArch(artifact.arch);
    if (this.platforms.some(p => p.os === artifact.os && same(p.arch))) {
      throw new Error(`platforms: ${artifact.os}/${artifact.arch} is given twice`);
    }
    this.platforms.push({ ...artifact });
  }

  /** The annotations `runWorkload()` puts on pod templates, from `workloadAnnotations` (a copy). */
  public get workloadAnnotations(): { [key: string]: string } {
    return { ...this.podAnnotations };
  }

  /**
   * Run a workload's pods under this Shim's RuntimeClass: sets `runtimeClassName` in its pod
   * template, and the Shim's `workloadAnnotations` on the template's metadata. Takes a
   * cdk8s-plus workload (`Deployment`, `StatefulSet`, `DaemonSet`, `Job`, `CronJob`, `Pod`, of
   * any cdk8s-plus version) or a generated `Kube*` object of those kinds.
   * @param workload the workload construct
   */
  public runWorkload(workload: IConstruct): void {
    const apiObject = workload instanceof ApiObject ? workload : Node.of(workload).defaultChild;
    if (!(apiObject instanceof ApiObject)) {
      throw new Error(`runWorkload: ${workload.node.path} is not a workload (it has no Kubernetes object as its default child)`);
    }
    const podSpec = POD_SPEC_PATHS[apiObject.kind];
    if (podSpec === undefined) {
      throw new Error(`runWorkload: ${workload.node.path} is a ${apiObject.kind}, not one of ${Object.keys(POD_SPEC_PATHS).join(', ')}`);
    }
    apiObject.addJsonPatch(JsonPatch.add(`${podSpec}/runtimeClassName`, this.runtimeClassName));
    if (Object.keys(this.podAnnotations).length > 0) annotatePodTemplate(workload, apiObject, podSpec, this.podAnnotations);
  }

  private renderPlatforms(): any {
    if (this.platforms.length === 0) return undefined;
    return [...this.platforms]
      .sort((a, b) => `${a.os}/${a.arch}`.localeCompare(`${b.os}/${b.arch}`))
      .map(p => ({ os: p.os, arch: p.arch, location: p.location, sha256: p.sha256 }));
  }

  private validateUniqueness(): string[] {
    const errors: string[] = [];
    if (this.platforms.length === 0 && this.location === undefined && this.image === undefined) {
      errors.push(`Shim "${this.name}": location: no artifact: set location or image, or add at least one platform`);
    }
    if (this.image && (this.platforms.length > 0 || this.location !== undefined)) {
      errors.push(`Shim "${this.name}": image: give either image or location/platforms, not both`);
    }
    for (const other of allShims(this)) {
      if (other === this) continue;
      if (other.name === this.name) errors.push(`Shim "${this.name}": name is used by another Shim in this app (${other.node.path})`);
      if (other.handler === this.handler) errors.push(`Shim "${this.name}": handler "${this.handler}" is also claimed by Shim "${other.name}"`);
      // Whether synthesized or left to the controller, one RuntimeClass cannot serve two Shims.
      if (other.runtimeClassName === this.runtimeClassName) {
        errors.push(`Shim "${this.name}": runtimeClassName "${this.runtimeClassName}" is also used by Shim "${other.name}"`);
      }
    }
    return errors;
  }
}

/**
 * The Shim's annotations that its RuntimeClass carries too. Argo CD's keys steer how Argo CD
 * syncs the objects of the manifests, which the controller's RuntimeClass is not one of, and
 * the runtime.spinkube.dev/ keys are the controller's own (the retry token, the adoption mark).
 */
function runtimeClassAnnotations(annotations: { [key: string]: string } | undefined): { [key: string]: string } | undefined {
  const kept = Object.entries(annotations ?? {}).filter(([key]) => !key.startsWith('argocd.argoproj.io/') && !key.startsWith('runtime.spinkube.dev/'));
  return kept.length > 0 ? Object.fromEntries(kept) : undefined;
}

function allShims(scope: IConstruct): ShimConstruct[] {
  return scope.node.root.node.findAll().filter((c): c is ShimConstruct => c instanceof ShimConstruct);
}

function mapValues<T>(map: { [key: string]: string }, convert: (value: string) => T): { [key: string]: T } {
  return Object.fromEntries(Object.entries(map).map(([key, value]) => [key, convert(value)]));
}

/**
 * Puts `annotations` on a workload's pod template. A cdk8s-plus workload (or any Pod) keeps
 * its pod metadata as an object that merges at synth, beside whatever else the user adds; a
 * plain object of another kind gets JSON patches fitted to the template as it is.
 */
function annotatePodTemplate(workload: IConstruct, apiObject: ApiObject, podSpecPath: string, annotations: { [key: string]: string }): void {
  const podMetadata = workload !== apiObject ? (workload as any).podMetadata : apiObject.kind === 'Pod' ? apiObject.metadata : undefined;
  if (typeof podMetadata?.addAnnotation === 'function') {
    for (const [key, value] of Object.entries(annotations)) podMetadata.addAnnotation(key, value);
    return;
  }
  const metadataPath = podSpecPath.replace(/\/spec$/, '/metadata');
  const metadata = metadataPath.split('/').slice(1).reduce((at: any, part) => at?.[part], apiObject.toJson());
  if (metadata === undefined) {
    apiObject.addJsonPatch(JsonPatch.add(metadataPath, { annotations: { ...annotations } }));
  } else if (metadata.annotations === undefined) {
    apiObject.addJsonPatch(JsonPatch.add(`${metadataPath}/annotations`, { ...annotations }));
  } else {
    for (const [key, value] of Object.entries(annotations)) {
      apiObject.addJsonPatch(JsonPatch.add(`${metadataPath}/annotations/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`, value));
    }
  }
}

/** Whether containerd lets annotation `key` through a `pod_annotations` glob (Go's path.Match: `*` stops at `/`). */
function globMatches(glob: string, key: string): boolean {
  const pattern = glob.split('*').map(part => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[^/]*');
  return new RegExp(`^${pattern}$`).test(key);
}

/** Where each workload kind keeps its pod spec. */
const POD_SPEC_PATHS: { [kind: string]: string } = {
  Pod: '/spec',
  Deployment: '/spec/template/spec',
  StatefulSet: '/spec/template/spec',
  DaemonSet: '/spec/template/spec',
  ReplicaSet: '/spec/template/spec',
  Job: '/spec/template/spec',
  CronJob: '/spec/jobTemplate/spec/template/spec',
};

/** The generated class wraps int-or-string values; a Rollout speaks plain JSON. */
function rolloutSpec(rollout: Rollout): any {
  const spec = rollout._toKube();
  if (spec.rolling === undefined) return spec;
  const maxUpdate = spec.rolling.maxUpdate;
  return {
    type: spec.type,
    rolling: {
      maxUpdate: typeof maxUpdate === 'number'
        ? ShimSpecRolloutStrategyRollingMaxUpdate.fromNumber(maxUpdate)
        : ShimSpecRolloutStrategyRollingMaxUpdate.fromString(maxUpdate),
    },
  };
}

function validateProps(name: string, runtimeClassName: string, props: ShimConstructProps): void {
  if (!isDnsLabel(name)) {
    throw new Error(`name: "${name}" is not a DNS label (lowercase letters, digits and '-', at most 63 characters); set props.name`);
  }
  if (!isDnsLabel(props.handler)) {
    throw new Error(`handler: "${props.handler}" is not a DNS label (lowercase letters, digits and '-', at most 63 characters)`);
  }
  if (!isDnsSubdomain(runtimeClassName)) {
    throw new Error(`runtimeClassName: "${runtimeClassName}" is not a DNS subdomain`);
  }
  const allowHttp = props.allowInsecureHttp ?? false;
  if (props.location !== undefined) {
    const problem = artifactUrlProblem(props.location, allowHttp);
    if (problem) throw new Error(`location: "${props.location}" ${problem}`);
  }
  if (props.sha256 !== undefined) {
    if (!isSha256(props.sha256)) throw new Error(`sha256: "${props.sha256}" is not 64 lowercase hex digits`);
    if (props.location === undefined) throw new Error('sha256: given without location (put per-platform checksums on the platform entries)');
  }
  validateRuntimeShape(props.payload, props.containerdRuntime);
  if (props.image) validateImage(props.image);
  for (const [resource, quantity] of Object.entries(props.overhead ?? {})) {
    if (!isQuantity(quantity)) throw new Error(`overhead.${resource}: "${quantity}" is not a Kubernetes quantity`);
  }
  for (const [key, value] of Object.entries(props.runtimeOptions ?? {})) {
    const option = runtimeOptionProblem(key, value, props.payload !== undefined);
    if (option) throw new Error(option.in === 'key' ? `runtimeOptions: ${option.problem}` : `runtimeOptions.${key}: ${option.problem}`);
  }
  validateMetadata('labels', props.labels);
  validateMetadata('annotations', props.annotations);
  validateWorkloadAnnotations(props.workloadAnnotations, props.containerdRuntime);
  if (props.syncWave !== undefined && !Number.isInteger(props.syncWave)) {
    throw new Error(`syncWave: must be a whole number, got ${props.syncWave}`);
  }
  validateTolerations('tolerations', props.tolerations ?? []);
}

function validateWorkloadAnnotations(annotations: { [key: string]: string } | undefined, settings: ContainerdHandlerSettings | undefined): void {
  validateMetadata('workloadAnnotations', annotations);
  const globs = settings?.podAnnotations ?? [];
  for (const key of Object.keys(annotations ?? {})) {
    if (!globs.some(glob => globMatches(glob, key))) {
      throw new Error(`workloadAnnotations: "${key}" would not reach the runtime: containerd passes a pod's annotations only where `
        + `containerdRuntime.podAnnotations lets them through (${globs.length > 0 ? globs.map(g => `"${g}"`).join(', ') : 'none given'}); add "${key}" there`);
    }
  }
}

function validatePlatform(p: ShimPlatformArtifact, index: number, allowInsecureHttp: boolean): void {
  const field = `platforms[${index}]`;
  if (!isPlatformOs(p.os)) throw new Error(`${field}.os: "${p.os}" is not a node os like "linux"`);
  if (!isPlatformArch(p.arch)) throw new Error(`${field}.arch: "${p.arch}" is not a node arch like "amd64" or "arm64"`);
  const problem = artifactUrlProblem(p.location, allowInsecureHttp);
  if (problem) throw new Error(`${field}.location: "${p.location}" ${problem}`);
  if (p.sha256 !== undefined && !isSha256(p.sha256)) throw new Error(`${field}.sha256: "${p.sha256}" is not 64 lowercase hex digits`);
}


const IMAGE_REFERENCE = /^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?(@sha256:[a-f0-9]{64})?$/;
const IMAGE_PATH = /^(\/[A-Za-z0-9._+-]+)+$/;

function validateImage(image: ShimImageArtifact): void {
  if (!IMAGE_REFERENCE.test(image.reference) || image.reference.length > 512) {
    throw new Error(`image.reference: "${image.reference}" is not an image reference (name[:tag][@sha256:<64 hex>], lowercase)`);
  }
  if (!IMAGE_PATH.test(image.path) || image.path.split('/').includes('..')) throw new Error(`image.path: "${image.path}" is not an absolute path inside the image`);
  if (image.sha256 !== undefined && !isSha256(image.sha256)) throw new Error(`image.sha256: "${image.sha256}" is not 64 lowercase hex digits`);
  (image.imagePullSecrets ?? []).forEach((name, i) => {
    if (!isDnsSubdomain(name)) throw new Error(`image.imagePullSecrets[${i}]: "${name}" is not a Secret name`);
  });
}

const PAYLOAD_PATH = /^[A-Za-z0-9_+-][A-Za-z0-9._+-]*(\/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)*$/;

/** Throws naming the field when the payload or handler settings would be refused later. */
function validateRuntimeShape(payload: ShimPayload | undefined, settings: ContainerdHandlerSettings | undefined): void {
  if (payload) {
    if (!PAYLOAD_PATH.test(payload.shim) || payload.shim.split('/').some(p => p === '..')) {
      throw new Error(`payload.shim: "${payload.shim}" is not a relative path inside the payload (no leading '/', no '..')`);
    }
    if (payload.runtimeType !== undefined && !isRuntimeType(payload.runtimeType)) {
      throw new Error(`payload.runtimeType: "${payload.runtimeType}" is not a runtime type name such as io.containerd.runc.v2`);
    }
  }
  for (const field of ['podAnnotations', 'containerAnnotations'] as const) {
    (settings?.[field] ?? []).forEach((glob, i) => {
      if (!isAnnotationGlob(glob)) {
        throw new Error(`containerdRuntime.${field}[${i}]: "${glob}" is not an annotation key or a glob of keys (letters, digits, '-', '_', '.', '/', '*')`);
      }
    });
  }
  if (settings?.snapshotter !== undefined && !isSnapshotterName(settings.snapshotter)) {
    throw new Error(`containerdRuntime.snapshotter: "${settings.snapshotter}" is not a snapshotter name`);
  }
}
