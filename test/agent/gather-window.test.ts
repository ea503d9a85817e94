import { AgentSettings, gatherWindow, NodeAgent } from '../../src/agent/node-agent';
import { AdmittedRequest, AgentResult, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { installRequest } from '../support/agent-request';
import { installerBench, RUNC_ONLY_CONFIG } from '../support/installer-bench';
import { sha256, shimBinary, tarGz } from '../support/installer-bundle';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// Install mode NodeAgent: a node's requests that one change causes (four Shims applied at once,
// a node's agent becoming Ready) are started together, as one change set with one containerd
// restart, once none came for the gather window. The controller's passes of several Shims run
// at once and each writes its requests in its own time, so the requests carry both the
// controller's pass interval and its slowest recent pass, and the agent waits for both. The
// agent's own code runs here against a fake containerd host and an in-memory Node.

jest.setTimeout(120_000);

describe('gatherWindow', () => {
  test.each([
    ['a controller that says nothing (older than both fields)', [{}], 1500, 4000],
    ['the pass interval alone', [{ passIntervalMs: 5000 }], 5500, 12_000],
    ['the interval and the slowest pass', [{ passIntervalMs: 1000, slowestPassMs: 2000 }], 3500, 8000],
    ['the largest of several requests', [{ passIntervalMs: 1000, slowestPassMs: 300 }, { passIntervalMs: 2000, slowestPassMs: 100 }], 2800, 6600],
    ['a very slow pass counts up to its bound', [{ passIntervalMs: 1000, slowestPassMs: 600_000 }], 11_500, 24_000],
  ] as [string, Pick<AdmittedRequest, 'passIntervalMs' | 'slowestPassMs'>[], number, number][])('%s', (_, requests, quietMs, maxMs) => {
    expect(gatherWindow(requests)).toEqual({ quietMs, maxMs });
  });
});

const bench = installerBench({ name: 'gather-window' });

/** Shim `shim`'s artifact: the test shim under the name of its own handler (`<shim>-handler`). */
async function artifactOf(shim: string): Promise<{ url: string; sha256: string }> {
  const tgz = await tarGz(bench.work, { [`containerd-shim-${shim}-handler-v2`]: shimBinary() });
  return { url: bench.server.put(`${shim}.tgz`, tgz), sha256: sha256(tgz) };
}

/** An agent on a fake containerd host; the handler of each request is its own (no --handler among the agent's flags). */
async function agentOn(settings: Partial<AgentSettings> = {}) {
  const host = await bench.startHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': RUNC_ONLY_CONFIG });
  const node = new NodeStandIn();
  const args = [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', '--restart=none', '--retries=0', '--set-gather=0'];
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
    admit: async (shim: string, pacing: Pick<AdmittedRequest, 'passIntervalMs' | 'slowestPassMs'>) => {
      const request = { ...installRequest(shim, `${shim}-handler`, await artifactOf(shim)), ...pacing };
      node.apply({ metadata: { annotations: { [requestKey(shim)]: JSON.stringify(request) } } });
      return Date.now();
    },
    ended: (shim: string) => eventually(async () => result(shim)?.phase === 'succeeded', 60_000, () => JSON.stringify(node.node.metadata)),
    stop: async () => {
      await agent.stop(10_000);
      await started;
    },
  };
}

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

test('requests admitted a slow pass apart are started together when the requests say the controller\'s passes are that slow', async () => {
  // GIVEN an agent, and a controller whose passes took up to 4 s lately (interval 1 s)
  const a = await agentOn();
  try {
    const pacing = { passIntervalMs: 1000, slowestPassMs: 4000 };
    // WHEN one Shim's request is admitted, and another Shim's 2 s later (beyond interval + margin)
    const first = await a.admit('shim-a', pacing);
    await sleep(2000);
    const second = await a.admit('shim-b', pacing);
    await a.ended('shim-a');
    await a.ended('shim-b');
    // THEN neither started before the second came: one change set
    const startedA = Date.parse(a.result('shim-a')!.startedAt!);
    const startedB = Date.parse(a.result('shim-b')!.startedAt!);
    expect(startedA).toBeGreaterThanOrEqual(second);
    expect(startedB).toBeGreaterThanOrEqual(second);
    // AND the first waited at least the quiet time after the second, not its own (a lower bound only)
    expect(Math.min(startedA, startedB) - first).toBeGreaterThanOrEqual(2000 + 5500 - 100);
  } finally {
    await a.stop();
  }
});

test('control: the same requests from a controller that says only its pass interval make two change sets', async () => {
  // GIVEN an agent, and requests that say the pass interval only (as before slowestPassMs)
  const a = await agentOn();
  try {
    const pacing = { passIntervalMs: 1000 };
    // WHEN one Shim's request is admitted, and another Shim's 2 s later
    await a.admit('shim-a', pacing);
    await sleep(2000);
    const second = await a.admit('shim-b', pacing);
    await a.ended('shim-a');
    await a.ended('shim-b');
    // THEN the first had started before the second came (its window is 1.5 s): two change sets
    expect(Date.parse(a.result('shim-a')!.startedAt!)).toBeLessThan(second);
  } finally {
    await a.stop();
  }
});

test('the outcomes of requests started together go to the Node in one write', async () => {
  // GIVEN an agent
  const a = await agentOn();
  try {
    const pacing = { passIntervalMs: 1000 };
    // WHEN three Shims' requests are admitted within the gather window (one change set)
    await a.admit('shim-a', pacing);
    await a.admit('shim-b', pacing);
    await a.admit('shim-c', pacing);
    for (const shim of ['shim-a', 'shim-b', 'shim-c']) await a.ended(shim);
    // THEN one Node write carried the three outcomes (one watch event for every watcher of Nodes, not three)
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

test('control: requests in two change sets write their outcomes in two writes', async () => {
  const a = await agentOn();
  try {
    const pacing = { passIntervalMs: 1000 };
    await a.admit('shim-a', pacing);
    await a.ended('shim-a');
    await a.admit('shim-b', pacing);
    await a.ended('shim-b');
    expect(a.outcomeWrites()).toHaveLength(2);
  } finally {
    await a.stop();
  }
});
