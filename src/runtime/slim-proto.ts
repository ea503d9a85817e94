// The controller's views of Nodes, Jobs and Pods read straight from the API server's
// protobuf encoding: the same values slim.ts keeps from JSON (a test holds the two equal on
// objects from a real API server), without decoding what is dropped. Field numbers are
// those of k8s.io/api's generated.proto (core/v1, batch/v1) and apimachinery's meta/v1.
import { Field, fields, mapEntry, text, time } from './protobuf';
import { ContainerState, OUR_ANNOTATIONS, SlimJob, SlimPod } from './slim';
import { NodeView } from './types';

/** The name and resourceVersion of an object (metadata = 1; name = 1, resourceVersion = 6). */
export function objectMeta(buf: Uint8Array): { name: string; resourceVersion: string } {
  let name = '';
  let resourceVersion = '';
  for (const f of fields(buf)) {
    if (f.no !== 1) continue;
    for (const m of fields(buf, f.start, f.end)) {
      if (m.no === 1) name = text(buf, m);
      else if (m.no === 6) resourceVersion = text(buf, m);
    }
  }
  return { name, resourceVersion };
}

interface Meta {
  name: string;
  uid?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** ObjectMeta: name 1, uid 5, creationTimestamp 8, labels 11, annotations 12 (managedFields, 17, is skipped). */
function meta(buf: Uint8Array, f: Field, keepAnnotation: (key: string) => boolean = () => true): Meta {
  const m: Meta = { name: '' };
  for (const e of fields(buf, f.start, f.end)) {
    switch (e.no) {
      case 1: m.name = text(buf, e); break;
      case 5: m.uid = optional(text(buf, e)); break;
      case 8: m.creationTimestamp = time(buf, e); break;
      case 11: {
        const [k, v] = mapEntry(buf, e);
        (m.labels ??= {})[k] = v;
        break;
      }
      case 12: {
        const [k, v] = mapEntry(buf, e);
        if (keepAnnotation(k)) (m.annotations ??= {})[k] = v;
        break;
      }
    }
  }
  return m;
}

/** An unset string field comes as "" (JSON leaves it out). */
function optional(value: string): string | undefined {
  return value === '' ? undefined : value;
}

/** Node: metadata 1, spec 2 (unschedulable 4), status 3 (conditions 4: type 1, status 2; nodeInfo 7: bootID 3). */
export function nodeFromProto(buf: Uint8Array): NodeView {
  let m: Meta = { name: '' };
  let ready = false;
  let schedulable = true;
  let bootID: string | undefined;
  for (const f of fields(buf)) {
    if (f.no === 1) {
      m = meta(buf, f, k => k.includes(OUR_ANNOTATIONS));
    } else if (f.no === 2) {
      for (const s of fields(buf, f.start, f.end)) if (s.no === 4) schedulable = s.varint === 0;
    } else if (f.no === 3) {
      for (const s of fields(buf, f.start, f.end)) {
        if (s.no === 4) {
          let type = '';
          let status = '';
          for (const c of fields(buf, s.start, s.end)) {
            if (c.no === 1) type = text(buf, c);
            else if (c.no === 2) status = text(buf, c);
          }
          if (type === 'Ready' && status === 'True') ready = true;
        } else if (s.no === 7) {
          for (const i of fields(buf, s.start, s.end)) if (i.no === 3) bootID = optional(text(buf, i));
        }
      }
    }
  }
  return { name: m.name, labels: m.labels ?? {}, annotations: m.annotations ?? {}, ready, schedulable, bootID };
}

/**
 * Job: metadata 1, status 3 (conditions 1, completionTime 3, succeeded 5). JobCondition:
 * type 1, status 2, lastTransitionTime 4, reason 5, message 6.
 */
export function jobFromProto(buf: Uint8Array): SlimJob {
  let m: Meta = { name: '' };
  const status: SlimJob['status'] = { conditions: [] };
  for (const f of fields(buf)) {
    if (f.no === 1) {
      m = meta(buf, f);
    } else if (f.no === 3) {
      for (const s of fields(buf, f.start, f.end)) {
        if (s.no === 3) {
          status.completionTime = time(buf, s);
        } else if (s.no === 5) {
          status.succeeded = s.varint || undefined;
        } else if (s.no === 1) {
          const c: Record<string, string | undefined> = {};
          for (const e of fields(buf, s.start, s.end)) {
            if (e.no === 1) c.type = text(buf, e);
            else if (e.no === 2) c.status = text(buf, e);
            else if (e.no === 4) c.lastTransitionTime = time(buf, e);
            else if (e.no === 5) c.reason = optional(text(buf, e));
            else if (e.no === 6) c.message = optional(text(buf, e));
          }
          if (c.type === 'Failed') status.conditions.push(c as SlimJob['status']['conditions'][number]);
        }
      }
    }
  }
  const { name, uid, creationTimestamp, labels, annotations } = m;
  return { metadata: { name, uid: uid!, creationTimestamp, labels, annotations }, status };
}

/**
 * Pod: metadata 1, status 3 (phase 1, startTime 7, containerStatuses 8: the first only).
 * ContainerStatus: state 2 (waiting 1: reason 1, message 2; terminated 3: message 4,
 * finishedAt 6).
 */
export function podFromProto(buf: Uint8Array): SlimPod {
  let m: Meta = { name: '' };
  const status: SlimPod['status'] = {};
  for (const f of fields(buf)) {
    if (f.no === 1) {
      m = meta(buf, f);
    } else if (f.no === 3) {
      for (const s of fields(buf, f.start, f.end)) {
        if (s.no === 1) {
          status.phase = optional(text(buf, s));
        } else if (s.no === 7) {
          status.startTime = time(buf, s);
        } else if (s.no === 8 && !status.containerStatuses) {
          const state: ContainerState = {};
          for (const c of fields(buf, s.start, s.end)) {
            if (c.no !== 2) continue;
            for (const kind of fields(buf, c.start, c.end)) {
              if (kind.no === 1) {
                const waiting: NonNullable<ContainerState['waiting']> = {};
                for (const e of fields(buf, kind.start, kind.end)) {
                  if (e.no === 1) waiting.reason = optional(text(buf, e));
                  else if (e.no === 2) waiting.message = optional(text(buf, e));
                }
                state.waiting = waiting;
              } else if (kind.no === 3) {
                const terminated: NonNullable<ContainerState['terminated']> = {};
                for (const e of fields(buf, kind.start, kind.end)) {
                  if (e.no === 4) terminated.message = optional(text(buf, e));
                  else if (e.no === 6) terminated.finishedAt = time(buf, e);
                }
                state.terminated = terminated;
              }
            }
          }
          status.containerStatuses = [{ state }];
        }
      }
    }
  }
  const { name, labels, annotations } = m;
  return { metadata: { name, labels, annotations }, status };
}

/** A watch ERROR's Status: message 3, code 6. */
export function statusFromProto(buf: Uint8Array): { code: number; message: string } {
  let code = 500;
  let message = '';
  for (const f of fields(buf)) {
    if (f.no === 3) message = text(buf, f);
    else if (f.no === 6) code = f.varint;
  }
  return { code, message };
}
