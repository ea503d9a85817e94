// The controller's view of the world: plain data, so that the planner stays pure.

export interface ShimObject {
  metadata: {
    name: string;
    uid: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
    resourceVersion?: string;
  };
  spec: any;
  status?: any;
}

export interface NodeView {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
  readonly taints: { key: string; value?: string; effect: string }[];
}

export type Operation = 'install' | 'uninstall';

export interface JobView {
  readonly name: string;
  readonly node: string;
  readonly operation: Operation;
  readonly revision: string;
  readonly phase: 'running' | 'succeeded' | 'failed';
  /** The installer's result (from the pod's termination message). */
  readonly result?: { reason?: string; message?: string; outcome?: string };
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
  reason: string;
  message: string;
}

export interface ShimStatus {
  observedGeneration?: number;
  revision?: string;
  nodes: number;
  nodesReady: number;
  nodesFailed: number;
  failedNodes: FailedNode[];
  conditions: Condition[];
}

export type Action =
  | { kind: 'addFinalizer' }
  | { kind: 'removeFinalizer' }
  | { kind: 'createJob'; node: string; operation: Operation; revision: string; artifact?: { location: string; sha256?: string } }
  | { kind: 'setNodeState'; node: string; state: string; revision?: string }
  | { kind: 'clearNode'; node: string }
  | { kind: 'applyRuntimeClass' }
  | { kind: 'deleteRuntimeClass' }
  | { kind: 'event'; type: 'Normal' | 'Warning'; reason: string; message: string };

export interface Plan {
  readonly actions: Action[];
  readonly status: ShimStatus;
}
