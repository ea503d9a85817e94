// Install mode NodeAgent, the controller's side: the planner's Jobs become requests in the
// nodes' requests ConfigMaps, and the agent's results (on the Nodes) come back as the Jobs'
// phases. The planner is the
// same in both modes; only what carries an operation to the node differs.
import { AGENT_DEADLINE_MS, AGENT_DID_NOT_ANSWER, judgeRequest, ObservedRequest } from './job-judgement';
import { installerRequest, JobSettings } from './jobs';
import { JobRequest, JobView, NodeView, ShimObject } from './types';
import { AdmittedRequest, isRecordedSuccess, requestsOn } from '../shared/agent-protocol';

// The deadline is the planner's judgement (job-judgement.ts); its names stay importable from here.
export { AGENT_DEADLINE_MS, AGENT_DID_NOT_ANSWER };

/**
 * Every request on these nodes, and the agent's result of it: the facts the planner judges.
 * `announced`: a success the agent recorded whose result an earlier controller announced.
 */
export function observeRequests(nodes: readonly NodeView[], announced?: (node: string, shim: string, name: string) => boolean): ObservedRequest[] {
  const observed: ObservedRequest[] = [];
  for (const node of nodes) {
    for (const { shim, admitted, result } of requestsOn(node.annotations)) {
      const told = isRecordedSuccess(result) && announced?.(node.name, shim, admitted.name) === true;
      observed.push({ kind: 'request', node: node.name, admitted, ...(result ? { reported: result } : {}), ...(told ? { announced: true } : {}) });
    }
  }
  return observed;
}

/**
 * Every request on these nodes as the planner judges a Job at `nowMs` (the controller hands
 * the planner the facts, observeRequests, instead): running until the agent reports, then its
 * outcome; failed once it has gone AGENT_DEADLINE_MS without one.
 */
export function agentJobViews(nodes: readonly NodeView[], nowMs: number): JobView[] {
  return observeRequests(nodes).map(request => judgeRequest(request, nowMs));
}

/**
 * What the controller admits for an operation (AdmittedRequest), written as JSON under the
 * Shim's name in the node's requests ConfigMap. `pacing`: the least time between two passes of
 * one Shim and the slowest recent pass (see AdmittedRequest).
 */
export function admittedRequest(settings: JobSettings, shim: ShimObject, job: JobRequest, now: string,
  pacing?: { passIntervalMs: number; slowestPassMs: number }): AdmittedRequest {
  return {
    name: job.name,
    shimUid: shim.metadata.uid,
    operation: job.operation,
    handler: job.handler,
    revision: job.revision,
    attempt: job.attempt,
    batch: job.batch,
    ...(job.artifact?.sha256 ? { sha256: job.artifact.sha256 } : {}),
    createdAt: now,
    ...(pacing ? { passIntervalMs: pacing.passIntervalMs, slowestPassMs: Math.round(pacing.slowestPassMs) } : {}),
    ...(job.recordOnSuccess ? { onSuccess: job.recordOnSuccess } : {}),
    request: installerRequest(settings, shim, job),
  };
}
