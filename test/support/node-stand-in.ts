// A Node object for the node agent's own code run in a test process: no API server. It applies
// the agent's merge patches (null removes) and sends every change back to the agent's watch as
// a MODIFIED event, as the API server would. The test changes the node as the controller would
// (apply), and its status as the kubelet would (setStatus). Stands in for the agent's Kube
// client (get, watch, mergePatch), and for the node's requests ConfigMap: a request the test
// applies as an annotation (requestKey(shim)) goes there, under the Shim's name, as the
// controller writes it (the agent lists and watches it; it is never on the Node).
import { shimOfRequestKey } from '../../src/shared/agent-protocol';

/** The agent's Node, in memory: merge patches applied (null removes) and sent to the watch as MODIFIED. */
export class NodeStandIn {
  readonly node = {
    metadata: { name: 'n1', resourceVersion: '1', labels: {} as Record<string, string>, annotations: {} as Record<string, string> },
    status: {} as Record<string, unknown>,
  };
  /** The node's requests ConfigMap's data (Shim name -> request), undefined while there is none. */
  requests?: Record<string, string>;
  private requestsVersion = 1;
  readonly patches: any[] = [];
  private readonly listeners = new Set<(event: any) => void>();
  private readonly requestListeners = new Set<(event: any) => void>();

  /** The agent watches the node (events from now on reach it). */
  get watched(): boolean {
    return this.listeners.size > 0;
  }

  async get(path: string): Promise<any> {
    if (path.includes('/configmaps')) {
      return { metadata: { resourceVersion: String(this.requestsVersion) }, items: this.requests ? [this.configMap()] : [] };
    }
    return structuredClone(this.node);
  }

  watch(path: string, onEvent: (event: any) => void): { done: Promise<void>; abort: () => void } {
    let end!: () => void;
    const done = new Promise<void>(res => { end = res; });
    const listeners = path.includes('/configmaps') ? this.requestListeners : this.listeners;
    listeners.add(onEvent);
    return { done, abort: () => { listeners.delete(onEvent); end(); } };
  }

  async mergePatch(_path: string, patch: any): Promise<any> {
    this.patches.push(patch);
    this.apply(patch);
    return structuredClone(this.node);
  }

  /** A change of the node (by the agent, or by the test as the controller). */
  apply(patch: { metadata: { labels?: Record<string, string | null>; annotations?: Record<string, string | null> } }): void {
    const requests: Record<string, string | null> = {};
    for (const field of ['labels', 'annotations'] as const) {
      for (const [k, v] of Object.entries(patch.metadata[field] ?? {})) {
        const shim = field === 'annotations' ? shimOfRequestKey(k) : undefined;
        if (shim !== undefined) requests[shim] = v;
        else if (v === null) delete this.node.metadata[field][k];
        else this.node.metadata[field][k] = v;
      }
    }
    if (Object.keys(requests).length > 0) this.writeRequests(requests);
    if (Object.keys(requests).length < Object.keys({ ...patch.metadata.labels, ...patch.metadata.annotations }).length) this.modified();
  }

  /** A write of the requests ConfigMap (a merge patch of its data; made if there is none). */
  private writeRequests(patch: Record<string, string | null>): void {
    const event = this.requests ? 'MODIFIED' : 'ADDED';
    this.requests ??= {};
    for (const [shim, v] of Object.entries(patch)) {
      if (v === null) delete this.requests[shim];
      else this.requests[shim] = v;
    }
    this.requestsVersion++;
    for (const l of this.requestListeners) l({ type: event, object: this.configMap() });
  }

  private configMap(): any {
    return { metadata: { name: 'rcm-requests.n1', resourceVersion: String(this.requestsVersion) }, data: { ...this.requests } };
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

