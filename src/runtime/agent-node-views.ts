// Install mode NodeAgent: the planner's view of each node, without reading Nodes whole. A
// Node is some 14 KB, four fifths of it status that every kubelet heartbeat sends again; in
// this mode the controller reads what the planner needs from three small sources instead:
//
// - the Nodes' metadata: labels (selection) and the node record (requests, results, gates);
// - readiness: the node's agent pod is Ready and not being deleted. Its kubelet runs it and
//   reports it, and the node lifecycle controller marks it NotReady when the node stops
//   reporting. A node without a Ready agent has nobody to carry out a request: it waits, as a
//   NotReady node does in install mode Jobs (a new node is admitted once its agent runs);
// - cordon: the Nodes that a field selector (`spec.unschedulable=true`) picks, metadata only.
//
// - the requests: what this controller admitted, from its own book (request-book.ts), in
//   the view's annotations under requestKey(shim) as the agent reads them.
//
// The boot ID and the kubelet's runtime handlers are the agent's to watch on its node: it
// checks its handlers whenever it starts (a reboot starts it again) and confirms an install
// with `status.runtimeHandlers` itself, where the kubelet reports that field. Pure: no I/O.
import { RequestBook } from './request-book';
import { AgentPod, NodeMetadata, samePlain } from './slim';
import { NodeView } from './types';
import { withoutRequests } from '../shared/agent-protocol';

/** Called with a node's view before and after a change (undefined: not known then). */
export type NodeViewChange = (before: NodeView | undefined, after: NodeView | undefined) => void;

export class AgentNodeViews {
  private readonly metadata = new Map<string, NodeMetadata>();
  /** Agent pods by name: where each runs and whether it is Ready. */
  private readonly agents = new Map<string, AgentPod>();
  /** The Ready agent pods of each node (two during an agent's rolling update, at most). */
  private readonly readyAgents = new Map<string, Set<string>>();
  private readonly cordoned = new Set<string>();
  private readonly views = new Map<string, NodeView>();

  constructor(private readonly onChange: NodeViewChange = () => undefined, readonly requests = new RequestBook()) {}

  get size(): number {
    return this.views.size;
  }

  list(): NodeView[] {
    return [...this.views.values()];
  }

  get(name: string): NodeView | undefined {
    return this.views.get(name);
  }

  /** The node's uid, where known (the owner of its requests ConfigMap). */
  uidOf(name: string): string | undefined {
    return this.metadata.get(name)?.uid;
  }

  putNode(node: NodeMetadata): void {
    const before = this.metadata.get(node.name);
    // Most node events change neither labels nor annotations (the kubelet's status updates,
    // half of what a rollout over 5,000 nodes reads): the view stays as it is, and no Shim is
    // asked whether the change concerns it.
    const unchanged = before !== undefined && before.uid === node.uid
      && samePlain(before.labels, node.labels) && samePlain(before.annotations, node.annotations);
    this.metadata.set(node.name, unchanged ? { ...node, labels: before.labels, annotations: before.annotations } : node);
    const recorded = this.requests.nodeAt(node.name, node.resourceVersion);
    if (!unchanged || recorded) this.refresh(node.name);
  }

  /**
   * A node event that changed nothing the view reads (its informer's fingerprint: a kubelet's
   * heartbeat), as putNode would find it, without its metadata decoded: only the version.
   */
  nodeSeenAt(name: string, resourceVersion: string): void {
    const before = this.metadata.get(name);
    if (!before) return;
    this.metadata.set(name, { ...before, resourceVersion: resourceVersion || undefined });
    if (this.requests.nodeAt(name, resourceVersion || undefined)) this.refresh(name);
  }

  removeNode(name: string): void {
    this.metadata.delete(name);
    this.requests.forget(name);
    this.refresh(name);
  }

  /** The book's requests of a node changed (the controller wrote them, or recorded one). */
  requestsChanged(name: string): void {
    // The node's watch may have shown a recording write before the write's answer came back.
    const version = this.metadata.get(name)?.resourceVersion;
    if (version !== undefined) this.requests.nodeAt(name, version);
    this.refresh(name);
  }

  putAgent(pod: AgentPod): void {
    const before = this.agents.get(pod.name);
    this.agents.set(pod.name, pod);
    if (before && before.node !== pod.node) this.unready(before);
    if (pod.ready && pod.node) {
      const ready = this.readyAgents.get(pod.node) ?? new Set<string>();
      ready.add(pod.name);
      this.readyAgents.set(pod.node, ready);
      this.refresh(pod.node);
    } else {
      this.unready(pod);
    }
  }

  removeAgent(name: string): void {
    const pod = this.agents.get(name);
    if (!pod) return;
    this.agents.delete(name);
    this.unready(pod);
  }

  setCordoned(name: string, cordoned: boolean): void {
    if (cordoned === this.cordoned.has(name)) return;
    if (cordoned) this.cordoned.add(name);
    else this.cordoned.delete(name);
    this.refresh(name);
  }

  private unready(pod: AgentPod): void {
    const ready = this.readyAgents.get(pod.node);
    if (!ready?.delete(pod.name)) return;
    if (ready.size === 0) this.readyAgents.delete(pod.node);
    this.refresh(pod.node);
  }

  private refresh(name: string): void {
    const before = this.views.get(name);
    const node = this.metadata.get(name);
    const after: NodeView | undefined = node && {
      name,
      labels: node.labels,
      annotations: withRequests(node.annotations, this.requests.annotations(name)),
      ready: this.readyAgents.has(name),
      schedulable: !this.cordoned.has(name),
    };
    if (after) this.views.set(name, after);
    else this.views.delete(name);
    if (before || after) this.onChange(before, after);
  }
}

/** A node's annotations with the book's requests (those on the Node, from an older controller, left out). */
function withRequests(annotations: Readonly<Record<string, string>>, requests: Record<string, string>): Record<string, string> {
  const own = withoutRequests(annotations);
  // Most nodes have no request of the book: their annotations are taken as they are (the views copy nothing then).
  return Object.keys(requests).length === 0 ? own as Record<string, string> : { ...own, ...requests };
}
