import * as fs from 'fs';
import * as path from 'path';
import { NodeAgent } from '../../src/agent/node-agent';
import { AgentResult, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { ShimNodeLabels } from '../../src/shared/node-labels';
import { installRequest } from '../support/agent-request';
import { FakeHost } from '../support/fake-host';
import { fakeHostArgs, installerBench, RUNC_ONLY_CONFIG } from '../support/installer-bench';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// An agent that starts (after a reboot, a crash, a rolling update) checks the handlers its node
// record says are installed before anything else: in install mode NodeAgent the controller
// does not watch boot IDs, so this check is what finds a host that lost a shim while the agent
// was not running. Even with the periodic check off (driftCheck 0). The agent's own code
// against a fake containerd host (installer-bench.ts) and an in-memory Node (NodeStandIn).

jest.setTimeout(120_000);

const SHIM = 'rcmtest-shim';
const HANDLER = 'rcmtest';
const GATE = ShimNodeLabels.handlerKey(SHIM);

const bench = installerBench({ name: 'agent-start', shim: true });

function startAgent(node: NodeStandIn, host: FakeHost): { stop: () => Promise<void> } {
  const agent = new NodeAgent(node as unknown as Kube, {
    nodeName: 'n1', namespace: 'rcm', installerArgs: [...fakeHostArgs(host, HANDLER), '--set-gather=0'], platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60,
  }, new Logger(false));
  const started = agent.start();
  return { stop: async () => { await agent.stop(10_000); await started; } };
}

/** Installs the handler through an agent and records it on the node as the controller would (the gate, the record); the agent then stops. */
async function installed(): Promise<{ node: NodeStandIn; host: FakeHost; binary: string }> {
  const host = await bench.startHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': RUNC_ONLY_CONFIG });
  const node = new NodeStandIn();
  const agent = startAgent(node, host);
  try {
    await eventually(async () => node.watched, 10_000, () => 'the agent never watched its node');
    node.apply({ metadata: { annotations: { [requestKey(SHIM)]: JSON.stringify(installRequest(SHIM, HANDLER, bench.shim)) } } });
    const result = () => JSON.parse(node.node.metadata.annotations[resultKey(SHIM)] ?? 'null') as AgentResult | null;
    await eventually(async () => result()?.phase === 'succeeded', 60_000, () => JSON.stringify(node.node.metadata.annotations));
    node.apply({
      metadata: {
        labels: { [GATE]: HANDLER, [ShimNodeLabels.stateKey(SHIM)]: 'provisioned' },
        annotations: { [ShimNodeLabels.installedKey(SHIM)]: JSON.stringify([{ handler: HANDLER, revision: 'r1' }]), [requestKey(SHIM)]: null, [resultKey(SHIM)]: null },
      },
    });
  } finally {
    await agent.stop();
  }
  const state = JSON.parse(fs.readFileSync(path.join(host.root, 'opt', 'rcm', 'state', `${HANDLER}.json`), 'utf8'));
  return { node, host, binary: path.join(host.root, state.binary) };
}

test('an agent that starts finds a shim binary lost while it was not running, and takes the gate away at once', async () => {
  // GIVEN a handler installed and gated on the node, and no agent running
  const { node, host, binary } = await installed();
  expect(fs.existsSync(binary)).toBe(true);
  // WHEN the binary goes while no agent runs (a wiped /opt at a reboot), and an agent starts, its periodic check off
  fs.rmSync(binary);
  const agent = startAgent(node, host);
  try {
    // THEN the gate goes (the RuntimeClass stops selecting the node), with the handler's record
    await eventually(async () => node.node.metadata.labels[GATE] === undefined, 30_000, () => JSON.stringify(node.node.metadata));
    expect(node.node.metadata.annotations[ShimNodeLabels.installedKey(SHIM)]).toBeUndefined();
  } finally {
    await agent.stop();
  }
});

test('an agent that starts on an intact node keeps every gate', async () => {
  // GIVEN a handler installed and gated on the node
  const { node, host } = await installed();
  const patchesBefore = node.patches.length;
  // WHEN an agent starts (a rolling update of the DaemonSet)
  const agent = startAgent(node, host);
  try {
    await eventually(async () => node.watched, 10_000, () => 'the agent never watched its node');
    // THEN after its check (a status of each handler: well under 5 s here) the gate is still there and nothing was written
    await new Promise(res => setTimeout(res, 5_000));
    expect(node.node.metadata.labels[GATE]).toBe(HANDLER);
    expect(node.patches.slice(patchesBefore)).toEqual([]);
  } finally {
    await agent.stop();
  }
});
