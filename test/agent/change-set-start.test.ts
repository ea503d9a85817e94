import { AgentSettings, NodeAgent } from '../../src/agent/node-agent';
import { AgentResult, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { installRequest } from '../support/agent-request';
import { installerBench, RUNC_ONLY_CONFIG } from '../support/installer-bench';
import { sha256, shimBinary, tarGz } from '../support/installer-bundle';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// Install mode NodeAgent: the controller hands a node's change set over in one write of its
// requests (fleet-pass.ts); the agent starts what came together at once, takes it in one write
// and writes the outcomes in one more. Nothing is waited for: no window decides what goes
// together. The agent's own code runs here against a fake containerd host and an in-memory Node.

jest.setTimeout(120_000);

const bench = installerBench({ name: 'change-set-start' });

/** Shim `shim`'s artifact: the test shim under the name of its own handler (`<shim>-handler`). */
async function artifactOf(shim: string): Promise<{ url: string; sha256: string }> {
  const tgz = await tarGz(bench.work, { [`containerd-shim-${shim}-handler-v2`]: shimBinary() });
  return { url: bench.server.put(`${shim}.tgz`, tgz), sha256: sha256(tgz) };
}

/** An agent on a fake containerd host; the handler of each request is its own (no --handler among the agent's flags). */
async function agentOn(settings: Partial<AgentSettings> = {}) {
  const host = await bench.startHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': RUNC_ONLY_CONFIG });
  const node = new NodeStandIn();
  const args = [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', '--restart=none', '--retries=0'];
  const agent = new NodeAgent(node as unknown as Kube, {
    nodeName: 'n1', namespace: 'rcm', platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60, installerArgs: args, ...settings,
  }, new Logger(false));
  const started = agent.start();
  await eventually(async () => node.watched, 10_000, () => 'the agent never watched its node');
  const result = (shim: string): AgentResult | undefined => {
    const text = node.node.metadata.annotations[resultKey(shim)];
    return text ? JSON.parse(text) : undefined;
  };
  return {
    result,
    /** The agent's writes to the Node that carry a result. */
    // (outcomes only: each change set is first taken in a write of its own, every result `running`)
    outcomeWrites: () => node.patches.filter(p => Object.entries(p.metadata?.annotations ?? {})
      .some(([k, v]) => k.endsWith('/result') && typeof v === 'string' && JSON.parse(v).phase !== 'running')),
    takeWrites: () => node.patches.filter(p => Object.entries(p.metadata?.annotations ?? {})
      .some(([k, v]) => k.endsWith('/result') && typeof v === 'string' && JSON.parse(v).phase === 'running')),
    /** The requests of these Shims, in one write of the node's requests (as the controller writes a change set). */
    admit: async (...shims: string[]) => {
      const annotations: Record<string, string> = {};
      for (const shim of shims) annotations[requestKey(shim)] = JSON.stringify(installRequest(shim, `${shim}-handler`, await artifactOf(shim)));
      node.apply({ metadata: { annotations } });
      return Date.now();
    },
    ended: (shim: string) => eventually(async () => result(shim)?.phase === 'succeeded', 60_000, () => JSON.stringify(node.node.metadata)),
    stop: async () => {
      await agent.stop(10_000);
      await started;
    },
  };
}

test('the requests of one write start together: one write takes them, one write carries their outcomes', async () => {
  // GIVEN an agent
  const a = await agentOn();
  try {
    // WHEN three Shims' requests come in one write (one change set)
    const admitted = await a.admit('shim-a', 'shim-b', 'shim-c');
    for (const shim of ['shim-a', 'shim-b', 'shim-c']) await a.ended(shim);
    // THEN they started at once (no window: well within a second of the write)
    for (const shim of ['shim-a', 'shim-b', 'shim-c']) expect(Date.parse(a.result(shim)!.startedAt!) - admitted).toBeLessThan(1000);
    // AND one Node write carried the three outcomes (one watch event for every watcher of Nodes, not three)
    const writes = a.outcomeWrites();
    expect(writes).toHaveLength(1);
    expect(Object.keys(writes[0].metadata.annotations).filter(k => k.endsWith('/result')).sort())
      .toEqual(['shim-a', 'shim-b', 'shim-c'].map(s => resultKey(s)).sort());
    // AND one write before it took the three (each `running`), so that the controller leaves them to the agent
    const takes = a.takeWrites();
    expect(takes).toHaveLength(1);
    expect(Object.keys(takes[0].metadata.annotations).filter(k => k.endsWith('/result')).sort())
      .toEqual(['shim-a', 'shim-b', 'shim-c'].map(s => resultKey(s)).sort());
  } finally {
    await a.stop();
  }
});

test('control: requests of two writes are two change sets, with two outcome writes', async () => {
  const a = await agentOn();
  try {
    await a.admit('shim-a');
    await a.ended('shim-a');
    await a.admit('shim-b');
    await a.ended('shim-b');
    expect(a.outcomeWrites()).toHaveLength(2);
  } finally {
    await a.stop();
  }
});
