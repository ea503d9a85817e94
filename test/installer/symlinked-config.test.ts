import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'smol-toml';
import { FakeHost } from '../support/fake-host';
import { fakeHostArgs, installerBench } from '../support/installer-bench';
import { runBundle } from '../support/installer-bundle';

// A symlinked containerd config under --host-root, as config management leaves it. The
// built bundle runs against a fake host (test/support/fake-host.ts: its own mount namespace
// with containerd 1.6 in /usr/bin); containerd 1.6's `config dump` is the oracle of what the
// node's containerd reads through the link.

const FIXTURE = fs.readFileSync(path.join(__dirname, '..', 'fixtures', 'containerd', 'custom-runtimes-v2.toml'), 'utf8');
const bench = installerBench({ name: 'symlinks', shim: true });
const { bundle } = bench;
/** The hosts by their root. */
const hosts = new Map<string, FakeHost>();

/** A fake host with containerd in /usr/bin and these files (text) and links (`{ link: target }`). */
async function hostRoot(entries: Record<string, string | { link: string }>): Promise<string> {
  const host = await bench.startHost({ ...entries, 'usr/bin/containerd': { copy: '/usr/bin/containerd' } });
  hosts.set(host.root, host);
  return host.root;
}

const args = (root: string) => fakeHostArgs(hosts.get(root)!);

/** Every path under the host root, to show that nothing changed. */
function listing(root: string): string[] {
  return fs.readdirSync(root, { recursive: true }).map(String).filter(p => !/^(proc|sys|dev)\//.test(p)).sort();
}

/** What containerd reads from `file` (a path in this process's view). */
function dump(file: string): Record<string, any> {
  return parse(execFileSync('containerd', ['--config', file, 'config', 'dump'], { encoding: 'utf8' }));
}

const RUNTIMES = ['plugins', 'io.containerd.grpc.v1.cri', 'containerd', 'runtimes'];
const runtimesOf = (config: Record<string, any>) => RUNTIMES.reduce((n, k) => n?.[k], config as any);

describe.each([
  ['an absolute link', '/etc/containerd/managed/config.toml'],
  ['a relative link', 'managed/config.toml'],
  ['a link that climbs above / (the host clamps it at its root)', '../../../../../../../../etc/containerd/managed/config.toml'],
])('%s', (_what, target) => {
  test('is edited in place through its target; the link stays; uninstall restores the target byte for byte', async () => {
    // GIVEN a host whose config is a link to the managed file
    const root = await hostRoot({ 'etc/containerd/config.toml': { link: target }, 'etc/containerd/managed/config.toml': FIXTURE });
    const managed = path.join(root, 'etc/containerd/managed/config.toml');
    const link = path.join(root, 'etc/containerd/config.toml');
    const before = dump(managed);
    const podConfig = fs.existsSync('/etc/containerd/config.toml') ? fs.readFileSync('/etc/containerd/config.toml', 'utf8') : undefined;

    // WHEN the shim is installed
    const install = await runBundle(bundle, 'install', [...args(root), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);

    // THEN the link is still the same link, and its target holds the handler next to everything it had
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
    expect(fs.readlinkSync(link)).toBe(target);
    const binary: string = install.result.paths.binary;
    expect(binary).toMatch(/^\/opt\/rcm\/shims\/rcmtest\/[0-9a-f]{16}\/containerd-shim-rcmtest-v2$/); // a host path
    expect(fs.existsSync(path.join(root, binary))).toBe(true);
    const after = dump(managed);
    expect(runtimesOf(after).rcmtest.runtime_type).toBe(binary);
    delete runtimesOf(after).rcmtest;
    expect(after).toEqual(before); // sandbox image, SystemdCgroup, kata: all still there
    // AND nothing outside the host root was touched
    expect(fs.existsSync('/etc/containerd/config.toml') ? fs.readFileSync('/etc/containerd/config.toml', 'utf8') : undefined).toBe(podConfig);

    // WHEN it is installed again THEN nothing changes
    const again = await runBundle(bundle, 'install', [...args(root), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);
    expect(again.result.outcome).toBe('unchanged');

    // WHEN it is uninstalled THEN the target is the original byte for byte and the link stays
    const uninstall = await runBundle(bundle, 'uninstall', args(root));
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(fs.readFileSync(managed, 'utf8')).toBe(FIXTURE);
    expect(fs.readlinkSync(link)).toBe(target);
    expect(fs.existsSync(path.join(root, 'opt/rcm/shims'))).toBe(false);
  });
});

test('a link whose target does not exist yet: the target is created, and removed again on uninstall; the link stays', async () => {
  const root = await hostRoot({ 'etc/containerd/config.toml': { link: '/srv/containerd/config.toml' } });
  const link = path.join(root, 'etc/containerd/config.toml');
  const install = await runBundle(bundle, 'install', [...args(root), `--location=${bench.shim.url}`]);
  expect(install.code).toBe(0);
  expect(fs.readlinkSync(link)).toBe('/srv/containerd/config.toml');
  expect(runtimesOf(dump(path.join(root, 'srv/containerd/config.toml'))).rcmtest.runtime_type).toBe(install.result.paths.binary);
  const uninstall = await runBundle(bundle, 'uninstall', args(root));
  expect(uninstall.code).toBe(0);
  expect(fs.existsSync(path.join(root, 'srv/containerd/config.toml'))).toBe(false);
  expect(fs.readlinkSync(link)).toBe('/srv/containerd/config.toml');
});

test('the install root behind a link (/opt -> /var/opt) is used through it, inside the host root', async () => {
  const root = await hostRoot({ 'etc/containerd/config.toml': FIXTURE, 'opt': { link: '/var/opt' }, 'var/opt/.keep': '' });
  const install = await runBundle(bundle, 'install', [...args(root), `--location=${bench.shim.url}`]);
  expect(install.code).toBe(0);
  expect(fs.lstatSync(path.join(root, 'opt')).isSymbolicLink()).toBe(true);
  expect(fs.existsSync(path.join(root, 'var', install.result.paths.binary))).toBe(true);
  expect(fs.existsSync(path.join(root, 'var/opt/rcm/state/rcmtest.json'))).toBe(true);
  expect((await runBundle(bundle, 'uninstall', args(root))).code).toBe(0);
  expect(fs.readFileSync(path.join(root, 'etc/containerd/config.toml'), 'utf8')).toBe(FIXTURE);
});

test('a config link loop is refused with exit 4 and the host untouched', async () => {
  const root = await hostRoot({ 'etc/containerd/config.toml': { link: 'other.toml' }, 'etc/containerd/other.toml': { link: '/etc/containerd/config.toml' } });
  const before = listing(root);
  const r = await runBundle(bundle, 'install', [...args(root), `--location=${bench.shim.url}`]);
  expect(r.code).toBe(4);
  expect(r.result).toMatchObject({ reason: 'HostPathUnresolvable' });
  expect(r.stderr).toMatch(/too many levels of symbolic links resolving \/etc\/containerd\/config.toml/);
  expect(listing(root)).toEqual(before);
});
