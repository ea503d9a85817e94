import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { parse } from 'smol-toml';
import { addRuntime, inheritedCgroupOption } from '../../src/installer/containerd-config';
import { fakeHostArgs, installerBench } from '../support/installer-bench';
import { runBundle } from '../support/installer-bundle';
import { CONTAINERD_BINARIES } from '../support/tools';

// The new handler runs its pods with the node's cgroup driver: SystemdCgroup of the default
// runtime (or runc), unless the Shim's options set it. containerd's `config dump` is the
// oracle of what the handler ends up with.

const FIXTURES = path.join(__dirname, '..', 'fixtures', 'containerd');
const fixture = (name: string) => fs.readFileSync(path.join(FIXTURES, name), 'utf8');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-cgroup-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

function handlerOptions(binary: string, text: string, plugin: string): any {
  const file = path.join(work, 'config.toml');
  fs.writeFileSync(file, text);
  const dumped: any = parse(execFileSync(binary, ['--config', file, 'config', 'dump'], { encoding: 'utf8' }));
  return dumped.plugins[plugin].containerd.runtimes.rcmtest.options ?? {};
}

describe('inheritedCgroupOption', () => {
  test.each([
    ['runc with SystemdCgroup = true (kubeadm on systemd)', 'custom-runtimes-v2.toml', 2, { SystemdCgroup: 'true' }],
    ['containerd 2 with SystemdCgroup = true', 'custom-runtimes-v3.toml', 3, { SystemdCgroup: 'true' }],
    ['containerd 1.6\'s defaults (SystemdCgroup = false): nothing to inherit, no options table', 'default-1.6.toml', 2, {}],
    ['an empty config', 'empty.toml', 2, {}],
  ])('%s', (_what, name, version, expected) => {
    expect(inheritedCgroupOption(fixture(name), version as 2 | 3)).toEqual(expected);
  });

  test('the default runtime wins over runc', () => {
    const text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "crun"\n'
      + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]\n  SystemdCgroup = true\n'
      + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n';
    expect(inheritedCgroupOption(text, 2)).toEqual({ SystemdCgroup: 'true' });
  });
});

describe.each(CONTAINERD_BINARIES.filter(c => c.version !== '1.7'))('containerd $version reads the inherited driver', c => {
  const [name, version, plugin] = c.major >= 2
    ? ['custom-runtimes-v3.toml', 3 as const, 'io.containerd.cri.v1.runtime']
    : ['custom-runtimes-v2.toml', 2 as const, 'io.containerd.grpc.v1.cri'];
  test('SystemdCgroup reaches the handler; the Shim\'s own setting wins', () => {
    const text = fixture(name);
    const inherited = { ...inheritedCgroupOption(text, version) };
    const entry = { handler: 'rcmtest', runtimeType: '/opt/rcm/shims/rcmtest/x/containerd-shim-rcmtest-v2' };
    expect(handlerOptions(c.binary, addRuntime(text, version, { ...entry, options: inherited }).text, plugin)).toMatchObject({ SystemdCgroup: true });
    const own = { ...inherited, SystemdCgroup: 'false' };
    expect(handlerOptions(c.binary, addRuntime(text, version, { ...entry, options: own }).text, plugin)).toMatchObject({ SystemdCgroup: false });
  });
});

describe('the installer on a systemd-cgroup node (fake host)', () => {
  const bench = installerBench({ work, shim: true, host: { 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': fixture('custom-runtimes-v2.toml') } });
  const { bundle } = bench;
  const args = () => [...fakeHostArgs(bench.host), `--location=${bench.shim.url}`];
  const options = () => handlerOptions('/usr/bin/containerd', fs.readFileSync(path.join(bench.host.root, 'etc/containerd/config.toml'), 'utf8'), 'io.containerd.grpc.v1.cri');

  test('gives the handler runc\'s SystemdCgroup = true, records it as inherited, and a Shim option overrides it', async () => {
    const r = await runBundle(bundle, 'install', args());
    expect(r.code).toBe(0);
    expect(options()).toEqual({ SystemdCgroup: true });
    expect(r.result.state).toMatchObject({ runtimeOptions: {}, inheritedOptions: { SystemdCgroup: 'true' } });
    // the same install again is a no-op: the inherited option is not a change of the Shim's options
    expect((await runBundle(bundle, 'install', [...args(), `--sha256=${r.result.sha256}`])).result.outcome).toBe('unchanged');
    const own = await runBundle(bundle, 'install', [...args(), '--runtime-option=SystemdCgroup=false']);
    expect(own.code).toBe(0);
    expect(options()).toEqual({ SystemdCgroup: false });
    expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
    expect(fs.readFileSync(path.join(bench.host.root, 'etc/containerd/config.toml'), 'utf8')).toBe(fixture('custom-runtimes-v2.toml'));
  }, 60_000);
});
