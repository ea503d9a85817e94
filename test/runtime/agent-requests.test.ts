import { AGENT_DEADLINE_MS, AGENT_DID_NOT_ANSWER, agentJobViews } from '../../src/runtime/agent-requests';
import { NodeView } from '../../src/runtime/types';
import { requestKey, resultKey } from '../../src/shared/agent-protocol';

// Install mode NodeAgent: the requests and results in a node record, as the planner sees Jobs.

const T0 = Date.parse('2026-11-25T00:00:00Z');
const admitted = {
  name: 'rcm-spin-i-1',
  shimUid: 'u1',
  operation: 'install',
  handler: 'spin',
  revision: 'r1',
  attempt: 1,
  batch: 'b1',
  createdAt: new Date(T0).toISOString(),
  request: { command: 'install', handler: 'spin' },
};
const node = (result?: object): NodeView => ({
  name: 'n1',
  labels: {},
  ready: true,
  schedulable: true,
  annotations: { [requestKey('spin')]: JSON.stringify(admitted), ...(result ? { [resultKey('spin')]: JSON.stringify(result) } : {}) },
});

test.each([
  ['no result yet', undefined, T0 + 5_000, { phase: 'running', started: false }],
  ['taken and reported under way', { name: admitted.name, admittedAt: admitted.createdAt, phase: 'running', startedAt: new Date(T0 + 1_000).toISOString() }, T0 + 5_000, { phase: 'running', started: true }],
  ['succeeded', { name: admitted.name, admittedAt: admitted.createdAt, phase: 'succeeded', startedAt: new Date(T0).toISOString(), finishedAt: new Date(T0 + 3_000).toISOString(), result: { outcome: 'installed' } },
    T0 + AGENT_DEADLINE_MS * 2, { phase: 'succeeded', started: true, result: { outcome: 'installed' } }],
  ['the result of an earlier request (another name) is not this one\'s', { name: 'rcm-spin-i-0', admittedAt: admitted.createdAt, phase: 'succeeded', startedAt: new Date(T0).toISOString() }, T0 + 5_000,
    { phase: 'running', started: false }],
  ['nor is that of this name admitted before (admitted again after a drift check dropped the gate)',
    { name: admitted.name, admittedAt: new Date(T0 - 60_000).toISOString(), phase: 'succeeded', startedAt: new Date(T0 - 60_000).toISOString() }, T0 + 5_000,
    { phase: 'running', started: false }],
])('%s', (_what, result, now, expected) => {
  // GIVEN a request in the node record (and maybe the agent's result) WHEN the planner's view is taken at `now`
  const [view] = agentJobViews([node(result)], now);
  // THEN it is what a Job in that state would be
  expect(view).toMatchObject({ name: admitted.name, node: 'n1', operation: 'install', handler: 'spin', ...expected });
});

test('a request without an outcome within the deadline fails, so that a node without its agent does not hold a rollout slot for ever', () => {
  // GIVEN a request nobody answered
  const nobody = node();
  // THEN it runs until the deadline, then fails with a reason that names the agent
  expect(agentJobViews([nobody], T0 + AGENT_DEADLINE_MS - 1)[0]).toMatchObject({ phase: 'running' });
  expect(agentJobViews([nobody], T0 + AGENT_DEADLINE_MS)[0]).toMatchObject({
    phase: 'failed',
    started: false,
    finishedAt: new Date(T0 + AGENT_DEADLINE_MS).toISOString(),
    result: { reason: AGENT_DID_NOT_ANSWER, message: expect.stringMatching(/rcm-node-agent running there/) },
  });
  // AND one the agent took counts from when it took it
  const taken = node({ name: admitted.name, admittedAt: admitted.createdAt, phase: 'running', startedAt: new Date(T0 + 60_000).toISOString() });
  expect(agentJobViews([taken], T0 + AGENT_DEADLINE_MS)[0]).toMatchObject({ phase: 'running' });
  expect(agentJobViews([taken], T0 + 60_000 + AGENT_DEADLINE_MS)[0]).toMatchObject({
    phase: 'failed', started: true, result: { reason: AGENT_DID_NOT_ANSWER, message: expect.stringMatching(/after taking it/) },
  });
});
