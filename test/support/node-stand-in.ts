// A Node object for the node agent's own code run in a test process: no API server. It applies
// the agent's merge patches (null removes) and sends every change back to the agent's watch as
// a MODIFIED event, as the API server would. The test changes the node as the controller would
// (apply), and its status as the kubelet would (setStatus). Stands in for the agent's Kube
// client (get, watch, mergePatch).

/** The agent's Node, in memory: merge patches applied (null removes) and sent to the watch as MODIFIED. */
export class NodeStandIn {
  readonly node = {
    metadata: { name: 'n1', resourceVersion: '1', labels: {} as Record<string, string>, annotations: {} as Record<string, string> },
    status: {} as Record<string, unknown>,
  };
  readonly patches: any[] = [];
  private readonly listeners = new Set<(event: any) => void>();

  /** The agent watches the node (events from now on reach it). */
  get watched(): boolean {
    return this.listeners.size > 0;
  }

  async get(): Promise<any> {
    return structuredClone(this.node);
  }

  watch(_path: string, onEvent: (event: any) => void): { done: Promise<void>; abort: () => void } {
    let end!: () => void;
    const done = new Promise<void>(res => { end = res; });
    this.listeners.add(onEvent);
    return { done, abort: () => { this.listeners.delete(onEvent); end(); } };
  }

  async mergePatch(_path: string, patch: any): Promise<any> {
    this.patches.push(patch);
    this.apply(patch);
    return structuredClone(this.node);
  }

  /** A change of the node (by the agent, or by the test as the controller). */
  apply(patch: { metadata: { labels?: Record<string, string | null>; annotations?: Record<string, string | null> } }): void {
    for (const field of ['labels', 'annotations'] as const) {
      for (const [k, v] of Object.entries(patch.metadata[field] ?? {})) {
        if (v === null) delete this.node.metadata[field][k];
        else this.node.metadata[field][k] = v;
      }
    }
    this.modified();
  }

  /** A new status of the node, as the kubelet posts it (the whole status is replaced), e.g. `{ runtimeHandlers: [{ name: 'runc' }] }`. */
  setStatus(status: Record<string, unknown>): void {
    this.node.status = structuredClone(status);
    this.modified();
  }

  private modified(): void {
    this.node.metadata.resourceVersion = String(Number(this.node.metadata.resourceVersion) + 1);
    for (const l of this.listeners) l({ type: 'MODIFIED', object: structuredClone(this.node) });
  }
}

