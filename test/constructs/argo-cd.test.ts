import * as fs from 'fs';
import * as path from 'path';
import { Testing } from 'cdk8s';
import { ArgoCd, ShimConstruct } from '../../src';
import { argoHealth, toLua } from '../support/argo-health';

// The Shim health check, run by a real Lua 5.1 interpreter (Debian's lua5.1, as Argo CD's
// gopher-lua speaks Lua 5.1) against Shims that the controller wrote on a real API server:
// test/integration/controller.test.ts checks the same verdicts live and, with
// RCM_WRITE_ARGO_FIXTURES=1, saves the objects here.
const FIXTURES = path.join(__dirname, '..', 'fixtures', 'argo-cd');
const fixture = (name: string) => JSON.parse(fs.readFileSync(path.join(FIXTURES, `${name}.json`), 'utf8'));

describe('ArgoCd.shimHealthCheck', () => {
  test.each([
    ['rolling-out', 'Progressing', /^RollingOut: 2 node\(s\) in progress, 0\/3 done/],
    ['ready', 'Healthy', /^AllNodesReady: 3\/3 selected nodes run revision /],
    ['retrying', 'Progressing', /retrying \(n\d: attempt 1 failed: DownloadFailed/],
    ['node-not-ready', 'Progressing', /not Ready or cordoned \(n1\)/],
    ['handler-held-by-another-shim', 'Progressing', /wait for another Shim to release the handler/],
    ['deleting', 'Progressing', /^The Shim is being deleted; the controller uninstalls it from every node first$/],
    ['install-failed', 'Degraded', /^InstallFailed: node n1: ChecksumMismatch: sha256 differs/],
    ['runtime-class-conflict', 'Degraded', /^RuntimeClassConflict: RuntimeClass "kata" exists and belongs to no Shim/],
    ['invalid-shim', 'Degraded', /^InvalidShim: /],
  ])('a Shim the controller wrote (%s) is %s', (name, status, message) => {
    // GIVEN a Shim as the controller left it
    const { shim, expected } = fixture(name);
    // WHEN Argo CD's health check judges it
    const health = argoHealth(shim);
    // THEN
    expect(health.status).toBe(status);
    expect(health.message).toMatch(message);
    expect(health).toEqual(expected); // what the live run saw
  });

  test('a Shim whose new generation the controller has not seen yet is Progressing, not its old verdict', () => {
    // GIVEN the Healthy Shim, edited since (the generation moves on, the status stays)
    const { shim } = fixture('ready');
    const edited = { ...shim, metadata: { ...shim.metadata, generation: shim.metadata.generation + 1 } };
    // THEN
    expect(argoHealth(edited)).toEqual({ status: 'Progressing', message: `Waiting for the controller to observe generation ${shim.metadata.generation + 1}` });
    // AND a Degraded one likewise waits for the controller's verdict on the fix
    const { shim: failed } = fixture('install-failed');
    expect(argoHealth({ ...failed, metadata: { ...failed.metadata, generation: failed.metadata.generation + 1 } }).status).toBe('Progressing');
  });

  test('a Shim just applied (as synthesized, no status yet) is Progressing', () => {
    const chart = Testing.chart();
    new ShimConstruct(chart, 'spin', { handler: 'spin', location: 'https://example.com/spin.tgz' });
    const shim = Testing.synth(chart).find(o => o.kind === 'Shim');
    expect(argoHealth({ ...shim, metadata: { ...shim.metadata, generation: 1 } }))
      .toEqual({ status: 'Progressing', message: 'Waiting for the controller to observe the Shim' });
  });

  test('the argocd-cm entry holds the script under the key Argo CD looks up', () => {
    expect(ArgoCd.healthCheckConfig()).toEqual({ 'resource.customizations.health.runtime.spinkube.dev_Shim': ArgoCd.shimHealthCheck });
    expect(ArgoCd.shimHealthCheck).toMatch(/^-- Argo CD health check of the Shim kind/);
  });

  test('the Argo CD docs install the shipped script from its file, under the key Argo CD looks up, rather than a copy of it', () => {
    const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'users', 'argo-cd.md'), 'utf8');
    expect(doc).toContain('--rawfile lua node_modules/runtime-class-manager-cdk8s/argocd/shim-health.lua');
    expect(doc).toContain(`{data: {"${ArgoCd.HEALTH_CHECK_KEY}": $lua}}`);
    expect(doc).not.toContain(ArgoCd.shimHealthCheck.split('\n')[0]);
  });

  test('the harness converts JSON faithfully (strings with quotes, newlines and UTF-8; arrays from 1)', () => {
    expect(toLua({ a: 'x"y\n\u00e9', b: [1, 2], c: null, d: true })).toBe('{["a"] = "x\\34y\\10\\195\\169", ["b"] = {1, 2}, ["d"] = true}');
  });
});

describe('ArgoCd.resolveSyncWaves', () => {
  test('defaults, overrides and their order', () => {
    expect(ArgoCd.resolveSyncWaves()).toEqual({ namespace: -40, definition: -30, controller: -20, shims: -10 });
    expect(ArgoCd.resolveSyncWaves({ shims: 5 })).toEqual({ namespace: -40, definition: -30, controller: -20, shims: 5 });
    expect(() => ArgoCd.resolveSyncWaves({ definition: -50 })).toThrow(/^syncWaves.definition: must be above syncWaves.namespace \(-40\), got -50/);
  });
});
