import * as fs from 'fs';
import * as path from 'path';
import { AgentSettings, NodeAgent } from '../../src/agent/node-agent';
import { AgentResult, HANDLER_NOT_REPORTED, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { installRequest } from '../support/agent-request';
import { fakeHostArgs, installerBench, RUNC_ONLY_CONFIG } from '../support/installer-bench';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// The node agent confirms its own installs with the kubelet (install mode NodeAgent, where the
// controller reads no Node status): on a node whose status lists runtimeHandlers, an install
// the installer reports done counts once the kubelet lists its handler there, and fails with
// HandlerNotReportedByKubelet if it does not within the wait; a node that lists none goes by
// the installer's check alone. The agent's own code runs in this process against a fake
// containerd host (installer-bench.ts: the test shim served on 127.0.0.1, no restart) and an
// in-memory Node (NodeStandIn), whose status the test posts as the kubelet would.

jest.setTimeout(120_000);

const SHIM = 'rcmtest-shim';
const HANDLER = 'rcmtest';
/** The installer's record of the handler on the host: written once its install is done. */
const STATE_FILE = path.join('opt', 'rcm', 'state', `${HANDLER}.json`);
const KUBELET_LISTS = (...names: string[]) => ({ runtimeHandlers: names.map(name => ({ name, features: { recursiveReadOnlyMounts: true } })) });

const bench = installerBench({ name: 'kubelet-confirm', shim: true });

/** A fake containerd host, a node with `status`, and an agent on both, watching the node. */
async function agentOn(status: Record<string, unknown>, settings: Partial<AgentSettings> = {}) {
  const host = await bench.startHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': RUNC_ONLY_CONFIG });
  const node = new NodeStandIn();
  node.setStatus(status);
  const agent = new NodeAgent(node as unknown as Kube, {
    nodeName: 'n1', namespace: 'rcm', installerArgs: [...fakeHostArgs(host, HANDLER), '--set-gather=0'], platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60, ...settings,
  }, new Logger(false));
  const started = agent.start();
  await eventually(async () => node.watched, 10_000, () => 'the agent never watched its node');
  return {
    node,
    /** The agent's result for the Shim's request, as written into the node record. */
    result: (): AgentResult | undefined => {
      const text = node.node.metadata.annotations[resultKey(SHIM)];
      return text ? JSON.parse(text) : undefined;
    },
    /** The installer has done its work on the host (its state file is there). */
    installed: () => fs.existsSync(path.join(host.root, STATE_FILE)),
    /** The controller admits an install of the handler on the node. */
    admit: () => node.apply({ metadata: { annotations: { [requestKey(SHIM)]: JSON.stringify(installRequest(SHIM, HANDLER, bench.shim)) } } }),
    stop: async () => {
      await agent.stop(10_000);
      await started;
    },
  };
}


const ended = (r: AgentResult | undefined) => r?.phase === 'succeeded' || r?.phase === 'failed';

test('an install on a node whose kubelet lists runtime handlers counts once the kubelet lists its handler', async () => {
  // GIVEN a node whose kubelet lists the default handler and runc, not rcmtest
  const a = await agentOn(KUBELET_LISTS('', 'runc'));
  try {
    // WHEN the controller admits the install of rcmtest there, and the installer has done its work on the host
    a.admit();
    await eventually(async () => a.installed(), 60_000, () => `the installer never wrote ${STATE_FILE}: ${JSON.stringify(a.node.node.metadata.annotations)}`);
    // THEN the request has no outcome while the kubelet does not list the handler (a second and a half later still)
    await new Promise(res => setTimeout(res, 1500));
    expect([undefined, 'running']).toContain(a.result()?.phase);
    // WHEN the kubelet lists it (its next status update)
    const listedAt = Date.now();
    a.node.setStatus(KUBELET_LISTS('', 'runc', HANDLER));
    // THEN the install succeeds, and not before the kubelet listed the handler
    await eventually(async () => ended(a.result()), 10_000, () => JSON.stringify(a.node.node.metadata.annotations));
    expect(a.result()).toMatchObject({ phase: 'succeeded', result: { outcome: 'installed', exitCode: 0 } });
    expect(Date.parse(a.result()!.finishedAt!)).toBeGreaterThanOrEqual(listedAt);
  } finally {
    await a.stop();
  }
});

test('an install whose handler the kubelet never lists fails with HandlerNotReportedByKubelet after the wait', async () => {
  // GIVEN a node whose kubelet lists the default handler and runc, and an agent that waits 2 s for the kubelet
  const a = await agentOn(KUBELET_LISTS('', 'runc'), { kubeletReportWaitMs: 2000 });
  try {
    // WHEN the controller admits the install of rcmtest there, and the kubelet never lists it
    a.admit();
    await eventually(async () => ended(a.result()), 60_000, () => JSON.stringify(a.node.node.metadata.annotations));
    // THEN the request fails with the reason, exit code 4, and a message naming the handler and what the kubelet lists
    const r = a.result()!;
    expect(a.installed()).toBe(true);
    expect(r).toMatchObject({ phase: 'failed', result: { outcome: 'failed', reason: HANDLER_NOT_REPORTED, exitCode: 4 } });
    expect(HANDLER_NOT_REPORTED).toBe('HandlerNotReportedByKubelet');
    expect(r.result!.message).toMatch(/\brcmtest\b/);
    expect(r.result!.message).toContain('within 2s (it lists (default), runc)');
    // AND only after the wait
    expect(Date.parse(r.finishedAt!) - Date.parse(r.startedAt)).toBeGreaterThanOrEqual(2000);
  } finally {
    await a.stop();
  }
});

test('an install on a node whose kubelet lists no runtime handlers succeeds on the installer\'s check alone', async () => {
  // GIVEN a node whose status has no runtimeHandlers (Kubernetes before 1.30, containerd before 2.0), and an agent that would wait 60 s for the kubelet
  const a = await agentOn({ nodeInfo: { containerRuntimeVersion: 'containerd://1.7.24', kubeletVersion: 'v1.29.10' } }, { kubeletReportWaitMs: 60_000 });
  try {
    // WHEN the controller admits the install of rcmtest there
    a.admit();
    // THEN the install succeeds without waiting for the kubelet (well within the 60 s it would wait)
    await eventually(async () => ended(a.result()), 30_000, () => JSON.stringify(a.node.node.metadata.annotations));
    expect(a.result()).toMatchObject({ phase: 'succeeded', result: { outcome: 'installed', exitCode: 0 } });
    expect(a.installed()).toBe(true);
  } finally {
    await a.stop();
  }
});
