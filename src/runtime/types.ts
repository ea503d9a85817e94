// The controller's view of the world: plain data, so that the planner stays pure. The Shim's
// spec is typed by the classes generated from the CRD (imports/), so a CRD change that the
// controller does not follow fails to compile.
import type {
  ShimSpec as GeneratedShimSpec,
  ShimSpecRolloutStrategyRollingMaxUpdate,
  ShimSpecRuntimeClassOverheadPodFixed,
} from '../../imports/runtime.spinkube.dev';
import type { RecordPatch } from '../shared/agent-protocol';

/**
 * A generated type as it arrives from the API server: int-or-string wrapper classes are plain
 * numbers or strings, string enums their string values.
 */
export type Wire<T> =
  T extends ShimSpecRolloutStrategyRollingMaxUpdate | ShimSpecRuntimeClassOverheadPodFixed ? number | string
    : T extends string ? `${T}`
      : T extends number | boolean ? T
        : T extends readonly (infer U)[] ? Wire<U>[]
          : T extends object ? { readonly [K in keyof T]: Wire<T[K]> }
            : T;

export type ShimSpec = Wire<GeneratedShimSpec>;

export interface ShimObject {
  metadata: {
    name: string;
    uid: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
    resourceVersion?: string;
    annotations?: Record<string, string>;
  };
  spec: ShimSpec;
  status?: ShimStatus;
}

export interface NodeView {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
  /** The Ready condition is True. */
  readonly ready: boolean;
  /** Not cordoned (`spec.unschedulable`). */
  readonly schedulable: boolean;
  /** `status.nodeInfo.bootID`: a new one means the node rebooted (its containerd config may be new). */
  readonly bootID?: string;
  /**
   * `status.runtimeHandlers` by name, where the node reports them (the field is beta in
   * Kubernetes 1.31, GA in 1.33, and filled from the runtime's CRI status: containerd 2.0+,
   * CRI-O 1.30+); undefined where it does not (an older kubelet or runtime, an empty list).
   */
  readonly runtimeHandlers?: readonly string[];
}

export type Operation = 'install' | 'uninstall';

/** An installer Job as the planner sees it (every Shim's: handlers are shared per node). */
export interface JobView {
  readonly name: string;
  readonly shimUid: string;
  readonly node: string;
  readonly operation: Operation;
  readonly handler: string;
  readonly revision: string;
  readonly sha256?: string;
  /** 1 for the first try of this operation on this node, then 2, 3, ... */
  readonly attempt: number;
  /** The pass that created it: succeeded Jobs are removed a whole batch at a time. */
  readonly batch?: string;
  readonly phase: 'running' | 'succeeded' | 'failed';
  /** Succeeded by the installer's report while the Job itself failed: a batch's removal (successful Jobs only) leaves it. */
  readonly reportedSuccess?: boolean;
  /** Its pod was started by the kubelet (a Job that never started may be dropped safely). */
  readonly started: boolean;
  /** When the Job was created (its creationTimestamp). */
  readonly createdAt?: string;
  readonly finishedAt?: string;
  /** The installer's result (from the pod's termination message). */
  readonly result?: { reason?: string; message?: string; outcome?: string };
  /**
   * Install mode NodeAgent: the agent wrote the node record after this success with its
   * outcome (JobRequest.recordOnSuccess), so the record already holds it; `announced` then
   * says whether its result was announced (an Event, the installs metric) already.
   */
  readonly recordedByAgent?: boolean;
  /** A success the agent recorded that was announced already (see recordedByAgent). */
  readonly announced?: boolean;
}

/** What the controller recorded as installed on a node (the `installed` annotation). */
export interface InstalledEntry {
  readonly handler: string;
  readonly revision: string;
  readonly sha256?: string;
  /** The node's boot ID when the install last succeeded. */
  readonly bootID?: string;
}

/** The last failed operation on a node (the `failure` annotation). */
export interface FailureRecord {
  readonly operation: Operation;
  readonly handler: string;
  readonly revision: string;
  readonly attempt: number;
  readonly reason: string;
  readonly message: string;
  /** When it failed. */
  readonly at: string;
  /** The Shim's retry annotation when it failed: a new value there retries at once. */
  readonly retry?: string;
}

export interface NodeRecord {
  readonly installed: InstalledEntry[];
  readonly failure?: FailureRecord;
}

/** A RuntimeClass as the planner sees it. */
export interface RuntimeClassView {
  readonly name: string;
  readonly handler: string;
  readonly annotations: Record<string, string>;
  readonly labels?: Record<string, string>;
  /** The uids of the Shims among its owners. */
  readonly shimOwners: string[];
  /** Any owner that is not a Shim (another operator's object). */
  readonly foreignOwner: boolean;
  readonly nodeSelector?: Record<string, string>;
  readonly tolerations?: unknown[];
  readonly overhead?: unknown;
}

export interface RuntimeClassObject {
  apiVersion: 'node.k8s.io/v1';
  kind: 'RuntimeClass';
  metadata: { name: string; labels: Record<string, string>; annotations: Record<string, string>; ownerReferences: object[] };
  handler: string;
  scheduling: { nodeSelector: Record<string, string>; tolerations?: unknown[] };
  overhead?: unknown;
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime?: string;
  observedGeneration?: number;
}

export interface FailedNode {
  name: string;
  operation?: Operation;
  reason: string;
  message: string;
  /** Failed attempts so far. */
  attempts?: number;
  /** When the next attempt may start. */
  nextAttempt?: string;
}

export interface ShimStatus {
  observedGeneration?: number;
  revision?: string;
  nodes: number;
  nodesReady: number;
  nodesFailed: number;
  nodesRetrying?: number;
  failedNodes: FailedNode[];
  conditions: Condition[];
}

export interface JobRequest {
  readonly name: string;
  readonly node: string;
  readonly operation: Operation;
  readonly handler: string;
  readonly revision: string;
  readonly attempt: number;
  readonly batch: string;
  readonly artifact?: NodeArtifact;
  /**
   * Install mode NodeAgent: the node record after this operation succeeds (the Shim's gate and
   * state labels, its installed and failure annotations; null: absent), as the planner would
   * write it on seeing the success. The agent writes it with its outcome, in one write: the
   * controller's own write of the record, and the watch event that write is, are saved.
   */
  readonly recordOnSuccess?: RecordPatch;
}

/** A Shim's record on a node as a merge patch: what a request carries as `onSuccess` (agent-protocol.ts). */
export type { RecordPatch } from '../shared/agent-protocol';

export type Action =
  | { kind: 'addFinalizer' }
  | { kind: 'removeFinalizer' }
  | { kind: 'createJob'; job: JobRequest }
  | { kind: 'deleteJob'; name: string }
  /**
   * The succeeded Jobs of these batches, in one request. Only batches none of whose Jobs still
   * runs: every succeeded Job of them was seen, and its result recorded, by this pass.
   */
  | { kind: 'deleteSucceededJobs'; batches: string[] }
  /** A merge patch of the node's labels and annotations (null removes). */
  | { kind: 'writeNode'; node: string; labels: Record<string, string | null>; annotations: Record<string, string | null> }
  /**
   * Server-side apply; `replace` deletes first (the handler is immutable); `cleanup` is a merge
   * patch sent after the apply, removing fields other managers hold that the spec no longer wants.
   */
  | { kind: 'applyRuntimeClass'; object: RuntimeClassObject; replace: boolean; cleanup?: Record<string, unknown> }
  | { kind: 'deleteRuntimeClass'; name: string }
  /** `count`: how many nodes the event stands for (one Event per kind of result and pass). */
  | { kind: 'event'; type: 'Normal' | 'Warning'; reason: string; message: string; count?: number };

export interface Plan {
  readonly actions: Action[];
  readonly status: ShimStatus;
  /** Reconcile again after this many seconds (a backoff expires), if set. */
  readonly requeueAfterSeconds?: number;
}

/** How failed operations are retried. */
export interface RetryPolicy {
  /** Delay after the first failure; doubled after each further one. */
  readonly baseSeconds: number;
  /** The longest delay. */
  readonly maxSeconds: number;
  /** Failed attempts after which a node counts as failed: Degraded, and the rollout stops. */
  readonly failureThreshold: number;
}

/** An artifact inside a container image (pulled by the kubelet for the installer Job). */
export interface ImageArtifact {
  readonly reference: string;
  readonly path: string;
  readonly pullSecrets: string[];
}

/** Where one node's artifact comes from: an HTTP(S) location, or a file in an image. */
export interface NodeArtifact {
  readonly location?: string;
  readonly image?: ImageArtifact;
  readonly sha256?: string;
}

/**
 * The reason of a failure the installer did not report itself: its container never ran
 * (CreateContainerError, RunContainerError while containerd restarted), it crashed, or a node
 * agent's report had no reason. (The value is the reason users have seen in status since 0.x.)
 */
export const NO_INSTALLER_REPORT = 'InstallerFailed';
