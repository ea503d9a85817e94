import { AgentSettings, NodeAgent } from '../../src/agent/node-agent';
import { AdmittedRequest, AgentResult, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { ShimNodeLabels } from '../../src/shared/node-labels';
import { installRequest } from '../support/agent-request';
import { fakeHostArgs, installerBench, RUNC_ONLY_CONFIG } from '../support/installer-bench';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

/** A result annotation that is an outcome (not the `running` with which the agent takes a request). */
const isOutcome = (value: string | null | undefined): boolean => typeof value === 'string' && JSON.parse(value).phase !== 'running';

// Install mode NodeAgent: the controller's request carries the Shim's record after a success
// (onSuccess: its gate and state labels, its installed and failure annotations), and the agent
// writes it with the outcome, in one write, so that the controller has no write of its own to
// make. The agent writes that Shim's keys only, and a gate only for the handler it has just
// installed (or the gate the node has already). The agent's own code runs in this process
// against a fake containerd host (installer-bench.ts) and an in-memory Node (NodeStandIn).

jest.setTimeout(120_000);

const SHIM = 'rcmtest-shim';
const HANDLER = 'rcmtest';
const KEYS = {
  gate: ShimNodeLabels.handlerKey(SHIM),
  state: ShimNodeLabels.stateKey(SHIM),
  installed: ShimNodeLabels.installedKey(SHIM),
  failure: ShimNodeLabels.failureKey(SHIM),
};
const RECORD = {
  labels: { [KEYS.gate]: HANDLER, [KEYS.state]: 'provisioned' },
  annotations: { [KEYS.installed]: JSON.stringify([{ handler: HANDLER, revision: 'r1' }]), [KEYS.failure]: null },
};

const bench = installerBench({ name: 'record-with-outcome', shim: true });

async function agentOn(labels: Record<string, string> = {}, settings: Partial<AgentSettings> = {}) {
  const host = await bench.startHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': RUNC_ONLY_CONFIG });
  const node = new NodeStandIn();
  node.apply({ metadata: { labels } });
  const agent = new NodeAgent(node as unknown as Kube, {
    nodeName: 'n1', namespace: 'rcm', installerArgs: [...fakeHostArgs(host, HANDLER), '--set-gather=0'], platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60, ...settings,
  }, new Logger(false));
  const started = agent.start();
  await eventually(async () => node.watched, 10_000, () => 'the agent never watched its node');
  const result = (): AgentResult | undefined => {
    const text = node.node.metadata.annotations[resultKey(SHIM)];
    return text ? JSON.parse(text) : undefined;
  };
  const request = (onSuccess: AdmittedRequest['onSuccess'], more: Partial<AdmittedRequest>) =>
    ({ ...installRequest(SHIM, HANDLER, bench.shim), ...more, ...(onSuccess ? { onSuccess } : {}) });
  return {
    node,
    result,
    admit: (onSuccess?: AdmittedRequest['onSuccess'], more: Partial<AdmittedRequest> = {}) =>
      node.apply({ metadata: { annotations: { [requestKey(SHIM)]: JSON.stringify(request(onSuccess, more)) } } }),
    ended: async () => eventually(async () => ['succeeded', 'failed'].includes(result()?.phase ?? ''), 60_000, () => JSON.stringify(node.node.metadata)),
    stop: async () => {
      await agent.stop(10_000);
      await started;
    },
  };
}

test('a success is written with the Shim\'s record in one write, and says so', async () => {
  // GIVEN an agent on a node without the handler
  const a = await agentOn();
  try {
    // WHEN the controller admits an install whose record after success sets the gate
    a.admit(RECORD);
    await a.ended();
    // THEN the outcome and the record arrive in the same write, the only one of this request
    // (the first write of the request takes it, `running`, before the node changes: not an outcome)
    const taken = a.node.patches.filter(p => JSON.parse(p.metadata?.annotations?.[resultKey(SHIM)] ?? '{}').phase === 'running');
    expect(taken).toHaveLength(1);
    const writes = a.node.patches.filter(p => isOutcome(p.metadata?.annotations?.[resultKey(SHIM)]));
    expect(writes).toHaveLength(1);
    expect(writes[0].metadata.labels).toEqual(RECORD.labels);
    expect(writes[0].metadata.annotations).toMatchObject({ [KEYS.installed]: RECORD.annotations[KEYS.installed], [KEYS.failure]: null });
    expect(a.result()).toMatchObject({ phase: 'succeeded', recorded: true, result: { outcome: 'installed' } });
    expect(a.node.node.metadata.labels[KEYS.gate]).toBe(HANDLER);
  } finally {
    await a.stop();
  }
});

test('keys of another Shim or of the node in the record are not written; the Shim\'s own are', async () => {
  const a = await agentOn();
  try {
    // WHEN the record (from a controller with another idea of it, or damaged) names other keys too
    const other = ShimNodeLabels.handlerKey('other-shim');
    a.admit({ labels: { ...RECORD.labels, [other]: 'x', 'node-role.kubernetes.io/control-plane': '' }, annotations: { ...RECORD.annotations, 'example.com/a': 'b' } });
    await a.ended();
    // THEN only the Shim's keys are written
    expect(a.node.node.metadata.labels[other]).toBeUndefined();
    expect(a.node.node.metadata.labels['node-role.kubernetes.io/control-plane']).toBeUndefined();
    expect(a.node.node.metadata.annotations['example.com/a']).toBeUndefined();
    expect(a.node.node.metadata.labels[KEYS.gate]).toBe(HANDLER);
    expect(a.result()).toMatchObject({ phase: 'succeeded', recorded: true });
  } finally {
    await a.stop();
  }
});

test('a record whose gate names a handler this request did not install is left to the controller (I1)', async () => {
  const a = await agentOn();
  try {
    // WHEN the record would open the gate to another handler than the one installed
    a.admit({ ...RECORD, labels: { [KEYS.gate]: 'not-installed-here', [KEYS.state]: 'provisioned' } });
    await a.ended();
    // THEN the outcome alone is written, not recorded: the controller records it, as for an older agent
    expect(a.result()).toMatchObject({ phase: 'succeeded' });
    expect(a.result()!.recorded).toBeUndefined();
    expect(a.node.node.metadata.labels[KEYS.gate]).toBeUndefined();
    expect(a.node.node.metadata.annotations[KEYS.installed]).toBeUndefined();
  } finally {
    await a.stop();
  }
});

test('a failure writes no record, and a request without one (an older controller) gets its outcome only', async () => {
  const a = await agentOn();
  try {
    // WHEN an install fails (its artifact's checksum is wrong)
    a.admit(RECORD, { request: { ...installRequest(SHIM, HANDLER, bench.shim).request, sha256: '0'.repeat(64) } });
    await a.ended();
    // THEN the failure is reported, and nothing of the record is written
    expect(a.result()).toMatchObject({ phase: 'failed' });
    expect(a.result()!.recorded).toBeUndefined();
    expect(a.node.node.metadata.labels[KEYS.gate]).toBeUndefined();
    expect(a.node.node.metadata.annotations[KEYS.installed]).toBeUndefined();
    // WHEN a request without a record (the next attempt, from an older controller) succeeds
    a.admit(undefined, { name: `${SHIM}-install-2`, attempt: 2, createdAt: new Date().toISOString() });
    await eventually(async () => a.result()?.name === `${SHIM}-install-2` && a.result()?.phase === 'succeeded', 60_000, () => JSON.stringify(a.node.node.metadata));
    // THEN its outcome only is written
    expect(a.result()!.recorded).toBeUndefined();
    expect(a.node.node.metadata.labels[KEYS.gate]).toBeUndefined();
  } finally {
    await a.stop();
  }
});

test('an uninstall whose handler the node\'s gate still names (a late write put it back) takes the gate away first', async () => {
  const a = await agentOn();
  try {
    // GIVEN the handler installed, its gate up
    a.admit(RECORD);
    await a.ended();
    expect(a.node.node.metadata.labels[KEYS.gate]).toBe(HANDLER);
    // WHEN an uninstall of it is admitted while the gate is still up (the controller takes it
    // away first; here a late write of an earlier outcome put it back)
    const uninstall: Partial<AdmittedRequest> = {
      name: `${SHIM}-uninstall-1`, operation: 'uninstall', createdAt: new Date().toISOString(), request: { command: 'uninstall', handler: HANDLER } as AdmittedRequest['request'],
    };
    const gone = { labels: { [KEYS.gate]: null, [KEYS.state]: null }, annotations: { [KEYS.installed]: null, [KEYS.failure]: null } };
    const before = a.node.patches.length;
    a.admit(gone, uninstall);
    await eventually(async () => a.result()?.name === uninstall.name && a.result()?.phase === 'succeeded', 60_000, () => JSON.stringify(a.node.node.metadata));
    // THEN the gate went in a write of its own, before the outcome
    const writes = a.node.patches.slice(before);
    const gateDropped = writes.findIndex(p => p.metadata?.labels?.[KEYS.gate] === null && p.metadata?.annotations === undefined);
    const outcome = writes.findIndex(p => isOutcome(p.metadata?.annotations?.[resultKey(SHIM)]));
    expect(gateDropped).toBeGreaterThanOrEqual(0);
    expect(gateDropped).toBeLessThan(outcome);
    // AND the outcome carried the record without the handler
    expect(a.result()).toMatchObject({ phase: 'succeeded', recorded: true });
    expect(a.node.node.metadata.annotations[KEYS.installed]).toBeUndefined();
  } finally {
    await a.stop();
  }
});
