import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { HANDLER_CLAIMED, NodeAgent, otherClaim } from '../../src/agent/node-agent';
import { AdmittedRequest, AgentResult, requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { ShimNodeLabels } from '../../src/shared/node-labels';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// Conflict resolution on the node (install mode NodeAgent): a request for a handler that
// another Shim holds there (its record lists it installed, or it asked for it first) is
// refused by the agent with a reason, and no installer runs. The controller admits no such
// request; these come from a controller with another view (a second controller, a stale
// cache), which the agent must not let replace another Shim's binary as the last writer.

const NOW = '2026-11-25T07:00:00.000Z';
const LATER = '2026-11-25T07:00:01.000Z';

function request(shim: string, handler: string, operation: 'install' | 'uninstall' = 'install', createdAt = NOW): AdmittedRequest {
  return {
    name: `${shim}-${operation[0]}-${handler}`,
    shimUid: `uid-${shim}`,
    operation,
    handler,
    revision: 'r1',
    attempt: 1,
    batch: 'b1',
    createdAt,
    request: { command: operation, handler, location: 'http://127.0.0.1:9/none.tgz', sha256: 'a'.repeat(64) } as any,
  };
}

const installed = (shim: string, handler: string) => ({ [ShimNodeLabels.installedKey(shim)]: JSON.stringify([{ handler, revision: 'r0' }]) });
const admitted = (shim: string, r: AdmittedRequest) => ({ [requestKey(shim)]: JSON.stringify(r) });

describe('otherClaim: who else holds a handler on the node', () => {
  test.each<[string, Record<string, string>, string, AdmittedRequest, RegExp | undefined]>([
    ['nobody', {}, 'b', request('b', 'spin'), undefined],
    ['the same Shim\'s own record (an upgrade, a repair)', installed('b', 'spin'), 'b', request('b', 'spin'), undefined],
    ['another Shim\'s record lists it: install refused', installed('a', 'spin'), 'b', request('b', 'spin'),
      /^handler spin is installed on this node by Shim "a"; the install of Shim "b" would take it over$/],
    ['another Shim\'s record lists it: uninstall refused too', installed('a', 'spin'), 'b', request('b', 'spin', 'uninstall'),
      /^handler spin is installed on this node by Shim "a"; the uninstall of Shim "b"/],
    ['another Shim\'s record lists another handler', installed('a', 'wasmtime'), 'b', request('b', 'spin'), undefined],
    ['another Shim asked first (an older request, unanswered)', admitted('a', request('a', 'spin')), 'b', request('b', 'spin', 'install', LATER),
      /^Shim "a" asked for handler spin on this node first \(install a-i-spin\)$/],
    ['another Shim asked later: this one goes first', admitted('a', request('a', 'spin', 'install', LATER)), 'b', request('b', 'spin'), undefined],
    ['another Shim\'s older request already answered', {
      ...admitted('a', request('a', 'spin')),
      [resultKey('a')]: JSON.stringify({ name: 'a-i-spin', admittedAt: NOW, phase: 'failed', startedAt: NOW } as AgentResult),
    }, 'b', request('b', 'spin', 'install', LATER), undefined],
    ['a damaged record of another Shim is no claim', { [ShimNodeLabels.installedKey('a')]: '{not json' }, 'b', request('b', 'spin'), undefined],
  ])('%s', (_what, annotations, shim, r, claim) => {
    const found = otherClaim(annotations, shim, r);
    if (claim) expect(found).toMatch(claim);
    else expect(found).toBeUndefined();
  });
});

test('the agent refuses a request for a handler another Shim holds on its node, and runs none of the installer', async () => {
  // GIVEN a node where Shim "a" has spin installed, where a controller with another view admitted Shim "b"'s install of
  // spin, and Shim "c"'s install of another handler; and an agent whose installer would run on an empty host root.
  // (The requests are there when the agent starts: its check at start leaves alone a handler with a request under way,
  // so a's gate and record stand, although this empty host has no spin; an agent started first would drop them.)
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-claims-'));
  const node = new NodeStandIn();
  node.apply({ metadata: { labels: { [ShimNodeLabels.handlerKey('a')]: 'spin' }, annotations: installed('a', 'spin') } });
  node.apply({ metadata: { annotations: { ...admitted('b', request('b', 'spin')), ...admitted('c', request('c', 'wasmtime')) } } });
  // WHEN the agent starts
  const agent = new NodeAgent(node as unknown as Kube, {
    nodeName: 'n1', namespace: 'rcm', installerArgs: [`--host-root=${root}`, '--retries=0'], platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60,
  }, new Logger(false));
  const started = agent.start();
  try {
    // THEN b's request fails with the claim's reason, naming the holder
    const result = (shim: string): AgentResult | undefined => {
      const text = node.node.metadata.annotations[resultKey(shim)];
      return text ? JSON.parse(text) : undefined;
    };
    await eventually(async () => result('b')?.phase === 'failed' && result('c')?.phase === 'failed', 30_000, () => JSON.stringify(node.node.metadata.annotations));
    expect(result('b')!.result).toMatchObject({ reason: HANDLER_CLAIMED, message: expect.stringContaining('installed on this node by Shim "a"'), exitCode: 4 });
    // AND c's request, which no one else holds, went to the installer (here it fails for the empty host, with another reason)
    expect(result('c')!.result!.reason).not.toBe(HANDLER_CLAIMED);
    // AND a's gate and record are untouched, and nothing was written on the host for b
    expect(node.node.metadata.labels[ShimNodeLabels.handlerKey('a')]).toBe('spin');
    expect(node.node.metadata.annotations[ShimNodeLabels.installedKey('a')]).toBe(installed('a', 'spin')[ShimNodeLabels.installedKey('a')]);
    expect(fs.existsSync(path.join(root, 'opt', 'rcm', 'state', 'spin.json'))).toBe(false);
  } finally {
    await agent.stop(5_000);
    await started;
    fs.rmSync(root, { recursive: true, force: true });
  }
});
