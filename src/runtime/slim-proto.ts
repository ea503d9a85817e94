// The controller's views of Nodes, Jobs and Pods read straight from the API server's
// protobuf encoding: the same values slim.ts keeps from JSON (a test holds the two equal on
// objects from a real API server), without decoding what is dropped. Field numbers are
// those of k8s.io/api's generated.proto (core/v1, batch/v1) and apimachinery's meta/v1.
import { hash } from 'crypto';
import { AgentPod, ContainerState, NodeMetadata, OUR_ANNOTATIONS, SlimJob, SlimPod } from './slim';
import { NodeView } from './types';
import { runtimeHandlersOf } from '../shared/agent-protocol';
import { Fields } from '../shared/kube/protobuf';

/** The name and resourceVersion of an object (metadata = 1; name = 1, resourceVersion = 6). */
export function objectMeta(buf: Buffer): { name: string; resourceVersion: string } {
  let name = '';
  let resourceVersion = '';
  const f = new Fields(buf);
  while (f.next()) {
    if (f.no !== 1) continue;
    const m = f.nested();
    while (m.next()) {
      if (m.no === 1) name = m.text();
      else if (m.no === 6) resourceVersion = m.text();
    }
  }
  return { name, resourceVersion };
}

interface Meta {
  name: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * ObjectMeta: name 1, uid 5, resourceVersion 6, creationTimestamp 8, deletionTimestamp 9, labels 11, annotations 12 (managedFields, 17, is skipped).
 * The timestamps only where the kind's view keeps one (`times`): making their text is most of what reading a Node's metadata costs.
 */
function meta(f: Fields, keepAnnotation: (key: string) => boolean = () => true, times = true): Meta {
  const m: Meta = { name: '' };
  const e = f.nested();
  while (e.next()) {
    switch (e.no) {
      case 1: m.name = e.text(); break;
      case 5: m.uid = optional(e.text()); break;
      case 6: m.resourceVersion = optional(e.text()); break;
      case 8: if (times) m.creationTimestamp = e.time(); break;
      case 9: if (times) m.deletionTimestamp = e.time(); break;
      case 11: m.labels = e.mapEntryInto(m.labels); break;
      case 12: m.annotations = e.mapEntryInto(m.annotations, keepAnnotation); break;
    }
  }
  return m;
}

/**
 * The parts every kind shares: metadata (1) into a Meta, and each field of the spec (2) and
 * the status (3) handed to the kind's own reader.
 */
function readObject(buf: Buffer,
  read: { status: (s: Fields) => void; spec?: (s: Fields) => void; keepAnnotation?: (key: string) => boolean; times?: boolean }): Meta {
  let m: Meta = { name: '' };
  const f = new Fields(buf);
  while (f.next()) {
    if (f.no === 1) {
      m = meta(f, read.keepAnnotation, read.times ?? true);
    } else if (f.no === 2 && read.spec) {
      const s = f.nested();
      while (s.next()) read.spec(s);
    } else if (f.no === 3) {
      const s = f.nested();
      while (s.next()) read.status(s);
    }
  }
  return m;
}

/** An unset string field comes as "" (JSON leaves it out). */
function optional(value: string): string | undefined {
  return value === '' ? undefined : value;
}

const ours = (key: string) => key.includes(OUR_ANNOTATIONS);

/** A NodeCondition or PodCondition (type 1, status 2) that is Ready=True. */
function isReadyCondition(f: Fields): boolean {
  let type = '';
  let status = '';
  const c = f.nested();
  while (c.next()) {
    if (c.no === 1) type = c.text();
    else if (c.no === 2) status = c.text();
  }
  return type === 'Ready' && status === 'True';
}

/** Node: metadata 1, spec 2 (unschedulable 4), status 3 (conditions 4: type 1, status 2; nodeInfo 7: bootID 3; runtimeHandlers 12: name 1). */
export function nodeFromProto(buf: Buffer): NodeView {
  let ready = false;
  let schedulable = true;
  let bootID: string | undefined;
  const handlers: string[] = [];
  const m = readObject(buf, {
    keepAnnotation: ours,
    times: false,
    spec: s => {
      if (s.no === 4) schedulable = s.value === 0;
    },
    status: s => {
      if (s.no === 4) {
        if (isReadyCondition(s)) ready = true;
      } else if (s.no === 7) {
        const i = s.nested();
        while (i.next()) if (i.no === 3) bootID = optional(i.text());
      } else if (s.no === 12) {
        // runtimeHandlers (Kubernetes 1.30+): NodeRuntimeHandler name 1 (empty: the default handler).
        let name = '';
        const h = s.nested();
        while (h.next()) if (h.no === 1) name = h.text();
        handlers.push(name);
      }
    },
  });
  return { name: m.name, labels: m.labels ?? {}, annotations: m.annotations ?? {}, ready, schedulable, bootID, ...runtimeHandlersOf(handlers) };
}

/**
 * A digest of every byte nodeFromProto and nodeMetadataFromProto read of a Node (a whole one,
 * or its metadata alone), bar the Ready condition's times and the resourceVersion: its name,
 * uid, labels and annotations (one run of fields: ObjectMeta writes them in order), its spec,
 * whether it is Ready, its nodeInfo and runtimeHandlers. A kubelet's heartbeat changes none of
 * them (only the conditions' times, the resourceVersion and managedFields), and this costs a
 * fraction of decoding the Node's labels and annotations into strings.
 */
export function nodeFingerprint(buf: Buffer): string {
  const regions = new RegionDigest();
  let ready = false;
  const f = new Fields(buf);
  while (f.next()) {
    if (f.no === 1) {
      const m = f.nested();
      let from = -1;
      let to = -1;
      let first = 0;
      while (m.next()) {
        if (m.no === 1 || m.no === 5) {
          regions.add(buf, m.no, m.start, m.end);
        } else if (m.no === 11 || m.no === 12) {
          if (from < 0) {
            from = m.start;
            first = m.no;
          }
          to = m.end;
        }
      }
      // Everything from the first label to the last annotation, keys and lengths included (a
      // field in between that changes, were there any, only makes the digest change); the
      // first entry's field number too: a lone label k=v is not a lone annotation k=v.
      if (from >= 0) regions.add(buf, first, from, to);
    } else if (f.no === 2) {
      regions.add(buf, f.no, f.start, f.end);
    } else if (f.no === 3) {
      const s = f.nested();
      while (s.next()) {
        if (s.no === 4) {
          if (isReadyCondition(s)) ready = true;
        } else if (s.no === 7 || s.no === 12) {
          regions.add(buf, s.no, s.start, s.end);
        }
      }
    }
  }
  return (ready ? 'R' : 'N') + regions.digest();
}

/**
 * Regions of one object, each after its field's number, place and length (regions of
 * different fields, or joined differently, do not hash alike), copied one after the other
 * and hashed in one call: a hash object per event and a call per region were a quarter of a
 * fingerprint's cost (every Node event is fingerprinted, a heartbeat once a minute per node).
 */
class RegionDigest {
  private length = 0;

  add(buf: Buffer, field: number, start: number, end: number): void {
    const size = end - start;
    const needed = this.length + 12 + size;
    if (needed > scratch.length) {
      const grown = Buffer.allocUnsafe(Math.max(needed, scratch.length * 2));
      scratch.copy(grown, 0, 0, this.length);
      scratch = grown;
    }
    scratch.writeUInt32BE(field, this.length);
    scratch.writeUInt32BE(start, this.length + 4);
    scratch.writeUInt32BE(size, this.length + 8);
    buf.copy(scratch, this.length + 12, start, end);
    this.length = needed;
  }

  digest(): string {
    return hash('sha1', scratch.subarray(0, this.length), 'base64');
  }
}
/** Shared by every fingerprint (one runs at a time: they are synchronous); grows to the largest Node's regions. */
let scratch = Buffer.allocUnsafe(8192);

/** A Node's metadata (PartialObjectMetadata, or a whole Node): its name, labels and our annotations. */
export function nodeMetadataFromProto(buf: Buffer): NodeMetadata {
  const m = readObject(buf, { keepAnnotation: ours, times: false, status: () => undefined });
  return { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels ?? {}, annotations: m.annotations ?? {} };
}

/** A node agent's pod: metadata 1 (deletionTimestamp 9), spec 2 (nodeName 10), status 3 (conditions 2: type 1, status 2). */
export function agentPodFromProto(buf: Buffer): AgentPod {
  let node = '';
  let ready = false;
  const m = readObject(buf, {
    spec: s => {
      if (s.no === 10) node = s.text();
    },
    status: s => {
      if (s.no === 2 && isReadyCondition(s)) ready = true;
    },
  });
  return { name: m.name, node, ready: ready && m.deletionTimestamp === undefined };
}

/**
 * Job: metadata 1, status 3 (conditions 1, completionTime 3, succeeded 5). JobCondition:
 * type 1, status 2, lastTransitionTime 4, reason 5, message 6.
 */
export function jobFromProto(buf: Buffer): SlimJob {
  const status: SlimJob['status'] = { conditions: [] };
  const m = readObject(buf, {
    status: s => {
      if (s.no === 3) {
        status.completionTime = s.time();
      } else if (s.no === 5) {
        status.succeeded = s.value || undefined;
      } else if (s.no === 1) {
        const c: Record<string, string | undefined> = {};
        const e = s.nested();
        while (e.next()) {
          if (e.no === 1) c.type = e.text();
          else if (e.no === 2) c.status = e.text();
          else if (e.no === 4) c.lastTransitionTime = e.time();
          else if (e.no === 5) c.reason = optional(e.text());
          else if (e.no === 6) c.message = optional(e.text());
        }
        if (c.type === 'Failed') status.conditions.push(c as SlimJob['status']['conditions'][number]);
      }
    },
  });
  const { name, uid, creationTimestamp, labels, annotations } = m;
  return { metadata: { name, uid: uid!, creationTimestamp, labels, annotations }, status };
}

/** ContainerState: waiting 1 (reason 1, message 2), terminated 3 (message 4, finishedAt 6). */
function containerState(f: Fields): ContainerState {
  const state: ContainerState = {};
  const kind = f.nested();
  while (kind.next()) {
    const e = kind.nested();
    if (kind.no === 1) {
      const waiting: NonNullable<ContainerState['waiting']> = {};
      while (e.next()) {
        if (e.no === 1) waiting.reason = optional(e.text());
        else if (e.no === 2) waiting.message = optional(e.text());
      }
      state.waiting = waiting;
    } else if (kind.no === 3) {
      const terminated: NonNullable<ContainerState['terminated']> = {};
      while (e.next()) {
        if (e.no === 4) terminated.message = optional(e.text());
        else if (e.no === 6) terminated.finishedAt = e.time();
      }
      state.terminated = terminated;
    }
  }
  return state;
}

/**
 * Pod: metadata 1, status 3 (phase 1, startTime 7, containerStatuses 8: the first only, its
 * state 2).
 */
export function podFromProto(buf: Buffer): SlimPod {
  const status: SlimPod['status'] = {};
  const m = readObject(buf, {
    times: false,
    status: s => {
      if (s.no === 1) {
        status.phase = optional(s.text());
      } else if (s.no === 7) {
        status.startTime = s.time();
      } else if (s.no === 8 && !status.containerStatuses) {
        let state: ContainerState = {};
        const c = s.nested();
        while (c.next()) if (c.no === 2) state = containerState(c);
        status.containerStatuses = [{ state }];
      }
    },
  });
  const { name, labels, annotations } = m;
  return { metadata: { name, labels, annotations }, status };
}

/** A watch ERROR's Status: message 3, code 6. */
export function statusFromProto(buf: Buffer): { code: number; message: string } {
  let code = 500;
  let message = '';
  const f = new Fields(buf);
  while (f.next()) {
    if (f.no === 3) message = f.text();
    else if (f.no === 6) code = f.value;
  }
  return { code, message };
}
