import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { parse } from 'smol-toml';
import { addRuntime, defaultRuntimesOf, removeRuntime } from '../../src/installer/containerd-config';
import { fakeHostArgs, installerBench } from '../support/installer-bench';
import { runBundle } from '../support/installer-bundle';
import { CONTAINERD_BINARIES } from '../support/tools';

// Uninstall removes only what is ours and still as we wrote it. On a node without a config,
// install writes `version = 2`, containerd's default runtimes (1.x drops them otherwise) and
// the handler; an admin then adds settings. containerd 1.x's `config dump` is the oracle of
// what the node reads after the uninstall.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-admin-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));
const ENTRY = { handler: 'rcmtest', runtimeType: '/opt/rcm/shims/rcmtest/0123/containerd-shim-rcmtest-v2', options: {} };
const ADMIN = '\n# added by the admin\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.example.com/pause:3.9"\n';

function dumped(binary: string, text: string): any {
  const file = path.join(work, 'config.toml');
  fs.writeFileSync(file, text);
  return parse(execFileSync(binary, ['--config', file, 'config', 'dump'], { encoding: 'utf8' }));
}
const cri = (config: any) => config.plugins['io.containerd.grpc.v1.cri'];

describe.each(CONTAINERD_BINARIES.filter(c => c.major < 2))('containerd $version, a node that had no config', c => {
  const defaults = defaultRuntimesOf(execFileSync(c.binary, ['config', 'default'], { encoding: 'utf8' }));

  test('settings an admin added after the install survive the uninstall, version line included', () => {
    const { text: installed, ...edit } = addRuntime('', 2, ENTRY, defaults);
    expect(installed.startsWith('version = 2\n')).toBe(true);
    const edited = installed + ADMIN;
    expect(cri(dumped(c.binary, edited)).sandbox_image).toBe('registry.example.com/pause:3.9');
    const { text: removed } = removeRuntime(edited, 2, 'rcmtest', edit);
    // containerd still reads the admin's sandbox image: the file still says version 2
    expect(removed.startsWith('version = 2\n')).toBe(true);
    expect(cri(dumped(c.binary, removed)).sandbox_image).toBe('registry.example.com/pause:3.9');
    expect(cri(dumped(c.binary, removed)).containerd.runtimes.rcmtest).toBeUndefined();
    expect(removed).not.toContain('runtime-class-manager');
  });

  test('an admin\'s edit inside the written-out default runtimes stays; an untouched block goes', () => {
    const { text: installed, ...edit } = addRuntime('', 2, ENTRY, defaults);
    expect(installed).toMatch(/default runtimes \(written out so that containerd 1.x keeps them\) sha256=[0-9a-f]{64}\n/);
    // untouched: the file is empty again
    expect(removeRuntime(installed, 2, 'rcmtest', edit).text).toBe('');
    // edited: runc on the systemd cgroup driver
    const edited = installed.replace(/SystemdCgroup = false/, 'SystemdCgroup = true');
    expect(edited).not.toBe(installed);
    const { text: removed } = removeRuntime(edited, 2, 'rcmtest', edit);
    expect(removed).not.toContain('runtime-class-manager');
    const runtimes = cri(dumped(c.binary, removed)).containerd.runtimes;
    expect(runtimes.runc.options.SystemdCgroup).toBe(true);
    expect(runtimes.rcmtest).toBeUndefined();
  });
});

describe('the installer on a node without a config (fake host, containerd 1.6)', () => {
  const bench = installerBench({ work, shim: true, host: { 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/.keep': '' } });

  test('uninstall keeps the file, and its version, once an admin added to it', async () => {
    const args = fakeHostArgs(bench.host);
    const file = path.join(bench.host.root, 'etc/containerd/config.toml');
    expect((await runBundle(bench.bundle, 'install', [...args, `--location=${bench.shim.url}`])).code).toBe(0);
    fs.appendFileSync(file, ADMIN);
    const uninstall = await runBundle(bench.bundle, 'uninstall', args);
    expect(uninstall.code).toBe(0);
    expect(fs.existsSync(file)).toBe(true);
    const config: any = parse(bench.host.run(['containerd', '--config', '/etc/containerd/config.toml', 'config', 'dump']));
    expect(cri(config).sandbox_image).toBe('registry.example.com/pause:3.9');
    expect(cri(config).containerd.runtimes.rcmtest).toBeUndefined();
  }, 60_000);
});
