import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { parse } from 'smol-toml';
import { addRuntime, detectConfigVersion, removeRuntime, RUNTIMES_PATH, tableHeaderKeys } from '../../src/installer/containerd-config';
import { fakeHostArgs, installerBench } from '../support/installer-bench';
import { publishShimVersions, runBundle } from '../support/installer-bundle';
import { CONTAINERD_BINARIES } from '../support/tools';

// Another tool rewrites the config with a TOML round trip (nvidia-ctk, or an admin's
// `containerd config dump > config.toml`): our markers are gone. Our handler is still
// recognised by its binary (under our shims folder), upgraded and removed. containerd's own
// dump is both the round trip and the oracle.

const FIXTURES = path.join(__dirname, '..', 'fixtures', 'containerd');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-roundtrip-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

const SHIMS = '/opt/rcm/shims/rcmtest/';
const owns = (runtimeType: string) => runtimeType.startsWith(SHIMS);
const entry = (version: string) => ({ handler: 'rcmtest', runtimeType: `${SHIMS}${version}/containerd-shim-rcmtest-v2`, options: { BinaryName: '/usr/bin/runc' } });

function dump(binary: string, text: string): string {
  const file = path.join(work, 'config.toml');
  fs.writeFileSync(file, text);
  return execFileSync(binary, ['--config', file, 'config', 'dump'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function handlerOf(dumped: string): any {
  const config = parse(dumped);
  for (const v of [2, 3] as const) {
    const runtime = RUNTIMES_PATH[v].reduce<any>((n, k) => n?.[k], config)?.rcmtest;
    if (runtime) return runtime;
  }
  return undefined;
}

test('table headers are read as TOML reads them', () => {
  expect(tableHeaderKeys('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.rcmtest]')).toEqual(['plugins', 'io.containerd.grpc.v1.cri', 'containerd', 'runtimes', 'rcmtest']);
  expect(tableHeaderKeys("    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.rcmtest.options]  # ours"))
    .toEqual(['plugins', 'io.containerd.cri.v1.runtime', 'containerd', 'runtimes', 'rcmtest', 'options']);
  expect(tableHeaderKeys('[ a . "b.c\\"d" . e ]')).toEqual(['a', 'b.c"d', 'e']);
  expect(tableHeaderKeys('[[array.of.tables]]')).toBeUndefined();
  expect(tableHeaderKeys('key = [1, 2]')).toBeUndefined();
});

const CASES = CONTAINERD_BINARIES.flatMap(c => (c.major >= 2 ? ['custom-runtimes-v3.toml', 'default-2.1.toml'] : ['custom-runtimes-v2.toml', `default-${c.version}.toml`])
  .map(fixture => ({ label: `containerd ${c.version}, ${fixture}`, binary: c.binary, major: c.major, fixture })));

describe.each(CASES)('$label, rewritten by `config dump`', ({ binary, major, fixture }) => {
  const original = fs.readFileSync(path.join(FIXTURES, fixture), 'utf8');
  const version = detectConfigVersion(original, major);
  const { text: installed, ...edit } = addRuntime(original, version, entry('aaaa'));

  test('our handler is still ours: upgraded in place and removed, the rest as containerd read it', () => {
    // GIVEN the file after a round trip: no markers, the handler written by containerd
    const rewritten = dump(binary, installed);
    expect(rewritten).not.toContain('runtime-class-manager');
    expect(handlerOf(rewritten).runtime_type).toBe(entry('aaaa').runtimeType);
    const rewrittenVersion = detectConfigVersion(rewritten, major);
    const withoutHandler = (text: string) => {
      const config: any = parse(dump(binary, text));
      for (const v of [2, 3] as const) delete RUNTIMES_PATH[v].reduce<any>((n, k) => n?.[k], config)?.rcmtest;
      return config;
    };
    const expected = withoutHandler(original);

    // WHEN a new version is installed THEN the handler points at it, once, and nothing else changed
    const upgraded = addRuntime(rewritten, rewrittenVersion, entry('bbbb'), undefined, owns).text;
    expect(handlerOf(dump(binary, upgraded)).runtime_type).toBe(entry('bbbb').runtimeType);
    expect(upgraded).not.toContain(entry('aaaa').runtimeType);
    expect(withoutHandler(upgraded)).toEqual(expected);

    // WHEN it is uninstalled THEN the handler is gone and the rest is what containerd read before
    const removed = removeRuntime(rewritten, rewrittenVersion, 'rcmtest', edit, owns);
    expect(removed.removed).toBe(true);
    expect(handlerOf(dump(binary, removed.text))).toBeUndefined();
    expect(withoutHandler(removed.text)).toEqual(expected);

    // AND a handler of the same name that is not ours is still refused
    expect(() => addRuntime(rewritten, rewrittenVersion, entry('bbbb'), undefined, () => false)).toThrow(/already configured in this file by something else/);
    expect(removeRuntime(rewritten, rewrittenVersion, 'rcmtest', edit, () => false).removed).toBe(false);
  });
});

describe('the installer after an admin\'s `config dump > config.toml` (fake host, containerd 1.6)', () => {
  const bench = installerBench({
    work,
    host: {
      'usr/bin/containerd': { copy: '/usr/bin/containerd' },
      'etc/containerd/config.toml': fs.readFileSync(path.join(FIXTURES, 'custom-runtimes-v2.toml'), 'utf8'),
    },
  });
  const { bundle } = bench;
  let urls: { v1: string; v2: string };
  beforeAll(async () => {
    urls = await publishShimVersions(bench.server, work);
  }, 60_000);
  const args = () => fakeHostArgs(bench.host);
  const roundTrip = () => {
    const file = path.join(bench.host.root, 'etc/containerd/config.toml');
    fs.writeFileSync(file, bench.host.run(['containerd', '--config', '/etc/containerd/config.toml', 'config', 'dump']));
  };
  const effective = () => handlerOf(bench.host.run(['containerd', '--config', '/etc/containerd/config.toml', 'config', 'dump']));

  test('upgrades and uninstalls the handler it no longer sees markers around', async () => {
    const v1 = await runBundle(bundle, 'install', [...args(), `--location=${urls.v1}`]);
    expect(v1.code).toBe(0);
    roundTrip();
    const v2 = await runBundle(bundle, 'install', [...args(), `--location=${urls.v2}`]);
    expect(v2.stderr).not.toMatch(/ERROR/);
    expect(v2.code).toBe(0);
    expect(effective().runtime_type).toBe(v2.result.paths.binary);
    expect(fs.existsSync(path.join(bench.host.root, v1.result.paths.binary))).toBe(false);
    roundTrip();
    const uninstall = await runBundle(bundle, 'uninstall', args());
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(effective()).toBeUndefined();
  }, 60_000);
});
