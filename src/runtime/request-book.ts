// Install mode NodeAgent: the requests this controller admitted, per node, as it wrote them
// into the nodes' requests ConfigMaps (agent-protocol.ts). The controller is their only
// writer, so it does not watch them (each request it wrote would come back as a watch event):
// it lists them when it starts and keeps this book of its writes. Pure: the controller writes
// and tells the book what it wrote.
//
// A request whose outcome the controller recorded on the node leaves the planner's view once
// the node shows that record (a node event at or after the recording write): before, the
// planner would see neither the request nor its record, and admit it again. It leaves the
// ConfigMap with the next write there (one write per request, not two; its result on the
// Node tells the agent it is done meanwhile).
import { requestKey } from '../shared/agent-protocol';

interface Entry {
  /** The request as written (AdmittedRequest as JSON). */
  readonly text: string;
  /** Its name (AdmittedRequest.name). */
  readonly name: string;
  /** The resourceVersion of the node write that recorded its outcome: hidden once the node shows it. */
  readonly recordedAt?: string;
  /**
   * Found at start with the agent's outcome recorded by the agent already: an earlier
   * controller announced it (its Event, the installs metric), so this one does not again.
   */
  readonly announced?: boolean;
}

interface NodeRequests {
  /** The ConfigMap exists (as far as this controller knows). */
  exists: boolean;
  /** Requests the planner sees, by Shim. */
  readonly shown: Map<string, Entry>;
  /** Shims whose request is done and recorded, still in the ConfigMap: withdrawn with its next write. */
  readonly stale: Set<string>;
}

export class RequestBook {
  private readonly nodes = new Map<string, NodeRequests>();

  /** A ConfigMap found at start: `data` by Shim name. */
  seed(node: string, data: Readonly<Record<string, string>>): void {
    const entry = this.of(node);
    entry.exists = true;
    for (const [shim, text] of Object.entries(data)) entry.shown.set(shim, { text, name: nameOf(text) });
  }

  /** The node's ConfigMap exists, as far as this controller knows. */
  exists(node: string): boolean {
    return this.nodes.get(node)?.exists ?? false;
  }

  /** The requests the planner sees on a node, as annotations (requestKey(shim) -> request). */
  annotations(node: string): Record<string, string> {
    const out: Record<string, string> = {};
    const shown = this.nodes.get(node)?.shown;
    if (!shown || shown.size === 0) return out;
    for (const [shim, { text }] of shown) {
      try {
        out[requestKey(shim)] = text;
      } catch {
        // Not a Shim's name: nothing the planner could judge.
      }
    }
    return out;
  }

  /**
   * At start, before the first pass: the requests found in the ConfigMaps whose outcome the
   * agent has already recorded (`finished(node, shim, name)`) were announced by an earlier
   * controller. One that finishes later is announced by this one.
   */
  announceFinished(finished: (node: string, shim: string, name: string) => boolean): void {
    for (const [node, entry] of this.nodes) {
      for (const [shim, request] of entry.shown) {
        if (finished(node, shim, request.name)) entry.shown.set(shim, { ...request, announced: true });
      }
    }
  }

  /** The request `name` of `shim` on the node was announced already (announceFinished). */
  announced(node: string, shim: string, name: string): boolean {
    const request = this.nodes.get(node)?.shown.get(shim);
    return request?.name === name && request.announced === true;
  }

  /** The name of `shim`'s request on the node (shown or stale), if any. */
  requestOf(node: string, shim: string): string | undefined {
    return this.nodes.get(node)?.shown.get(shim)?.name;
  }

  /**
   * The data patch that admits `text` as `shim`'s request (or withdraws it: null), with the
   * stale requests that waited for a write. Undefined: nothing to write (a withdrawal of what
   * the ConfigMap does not hold).
   */
  patchFor(node: string, shim: string, text: string | null): Record<string, string | null> | undefined {
    const entry = this.nodes.get(node);
    if (text === null && !entry?.shown.has(shim) && !entry?.stale.has(shim)) return undefined;
    const patch: Record<string, string | null> = {};
    for (const stale of entry?.stale ?? []) patch[stale] = null;
    patch[shim] = text;
    return patch;
  }

  /** `patch` (from patchFor) is written (`exists`: the ConfigMap exists now; false: a withdrawal found none). */
  written(node: string, patch: Readonly<Record<string, string | null>>, exists = true): void {
    const entry = this.of(node);
    entry.exists = exists;
    for (const [shim, text] of Object.entries(patch)) {
      entry.stale.delete(shim);
      if (text === null) entry.shown.delete(shim);
      else entry.shown.set(shim, { text, name: nameOf(text) });
    }
  }

  /**
   * The outcome of request `name` of `shim` is recorded: by the node write of `version` (it
   * stays shown until the node shows that write), or earlier (undefined: it goes now).
   * Nothing is written to the ConfigMap for it. False: the book holds no such request.
   */
  recorded(node: string, shim: string, name: string, version?: string): boolean {
    const entry = this.nodes.get(node);
    const request = entry?.shown.get(shim);
    if (!entry || request?.name !== name) return false;
    if (version === undefined) {
      entry.shown.delete(shim);
      entry.stale.add(shim);
    } else {
      entry.shown.set(shim, { ...request, recordedAt: version });
    }
    return true;
  }

  /** The node is seen at `version`: requests recorded by a write up to it go. True when one went. */
  nodeAt(node: string, version: string | undefined): boolean {
    const entry = this.nodes.get(node);
    if (!entry) return false;
    let changed = false;
    for (const [shim, request] of entry.shown) {
      if (request.recordedAt === undefined || !atOrAfter(version, request.recordedAt)) continue;
      entry.shown.delete(shim);
      entry.stale.add(shim);
      changed = true;
    }
    return changed;
  }

  /** The nodes whose ConfigMap holds a request of `shim` (shown or stale). */
  nodesWith(shim: string): string[] {
    return [...this.nodes].filter(([, e]) => e.shown.has(shim) || e.stale.has(shim)).map(([node]) => node);
  }

  /** The node is gone (its ConfigMap goes with it: the Node owns it). */
  forget(node: string): void {
    this.nodes.delete(node);
  }

  private of(node: string): NodeRequests {
    let entry = this.nodes.get(node);
    if (!entry) {
      entry = { exists: false, shown: new Map(), stale: new Set() };
      this.nodes.set(node, entry);
    }
    return entry;
  }
}

function nameOf(text: string): string {
  try {
    const name = JSON.parse(text)?.name;
    return typeof name === 'string' ? name : '';
  } catch {
    return '';
  }
}

/**
 * `version` is `than` or later. Resource versions are etcd revisions, which grow (the API
 * server's own watch cache orders events by them); one that is not a number (another storage)
 * is taken as later: the request then goes at the node's next event.
 */
function atOrAfter(version: string | undefined, than: string): boolean {
  if (version === undefined || !/^\d+$/.test(version) || !/^\d+$/.test(than)) return true;
  return version.length !== than.length ? version.length > than.length : version >= than;
}
