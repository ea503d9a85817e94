import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'smol-toml';
import { containerdBaseConfig, FakeHost, HostEntry } from '../support/fake-host';
import { installerBench } from '../support/installer-bench';
import { runBundle } from '../support/installer-bundle';
import { renderK3sConfig } from '../support/k3s';
import { eventually } from '../support/rest';
import { CONTAINERD_BINARIES, stackBinary } from '../support/tools';

// The distributions' own layouts, with containerd only where each distribution keeps it
// (never on the host's PATH), in a fake host: a mount namespace pivoted into a folder, whose
// init stands in for k3s or rke2 (it renders config.toml from the template and runs
// containerd from the distribution's data folder, again after each restart). The installer bundle runs outside, with the
// host's / under --host-root, as in its pod. The host's containerd judges the result.

const bench = installerBench({ name: 'distros', shim: true });
const { bundle } = bench;

/**
 * Where k3s and rke2 keep containerd, its config and socket. Both unpack their binaries
 * under data/<version>; k3s's data/current and rke2's bin are links to the running one.
 * rke2 is built on k3s's agent: its containerd socket is k3s's.
 */
const RANCHER = {
  k3s: {
    etc: '/var/lib/rancher/k3s/agent/etc/containerd',
    bin: '/var/lib/rancher/k3s/data/current/bin',
    socket: '/run/k3s/containerd/containerd.sock',
    data: '/var/lib/rancher/k3s/data/5f3a1b',
    link: ['var/lib/rancher/k3s/data/current', '/var/lib/rancher/k3s/data/5f3a1b'],
    unit: 'k3s',
  },
  rke2: {
    etc: '/var/lib/rancher/rke2/agent/etc/containerd',
    bin: '/var/lib/rancher/rke2/bin',
    socket: '/run/k3s/containerd/containerd.sock',
    data: '/var/lib/rancher/rke2/data/v1.31.2-rke2r1',
    link: ['var/lib/rancher/rke2/bin', '/var/lib/rancher/rke2/data/v1.31.2-rke2r1/bin'],
    unit: 'rke2-server',
  },
};
type Rancher = typeof RANCHER.k3s;

/**
 * What k3s (and rke2) do with containerd, as a busybox shell loop: render config.toml from
 * the template of its containerd's major version (config-v3.toml.tmpl for 2.x,
 * config.toml.tmpl for 1.x), putting the base config where the template says
 * {{ template "base" . }}, or from the base alone without a template; then run containerd,
 * and again when it exits.
 */
function rancherInit(d: Rancher, template: string, flags = ''): string {
  return `
    D=${d.etc}
    while true; do
      ${renderK3sConfig('$D', template, '$D/base.toml')}
      ${d.bin}/containerd --config $D/config.toml ${flags}>> /var/log/containerd.log 2>&1 &
      echo $! > /run/rancher-containerd.pid
      wait $!
      sleep 0.2
    done`;
}

/** `systemctl restart k3s`, as the test's host has no systemd: returns once the old containerd is gone. */
const RESTART = 'old=$(cat /run/rancher-containerd.pid); kill $old; while kill -0 $old 2>/dev/null; do sleep 0.05; done';

const templateOf = (major: number) => (major >= 2 ? 'config-v3.toml.tmpl' : 'config.toml.tmpl');

async function rancherHost(d: Rancher, containerd: { major: number; binary: string }, baseImports?: string): Promise<FakeHost> {
  const host = await bench.startHost({
    ...rancherFiles(d, containerd.binary),
    [`${d.etc.slice(1)}/base.toml`]: containerdBaseConfig(containerd.binary, {
      root: d.etc.replace('/etc/containerd', '/containerd'), state: path.dirname(d.socket), socket: d.socket,
    }).replace(/^imports = \[\]$/m, baseImports ? `imports = ['${baseImports}']` : '$&'),
  }, rancherInit(d, templateOf(containerd.major)));
  await serving(host, d);
  return host;
}

/** The distribution's containerd and ctr in its data folder, its unit, a log folder. */
function rancherFiles(d: Rancher, binary: string): Record<string, HostEntry> {
  const bin = path.dirname(binary);
  return {
    [`${d.data.slice(1)}/bin/containerd`]: { copy: path.join(bin, 'containerd') },
    [`${d.data.slice(1)}/bin/ctr`]: { copy: path.join(bin, 'ctr') },
    [d.link[0]]: { link: d.link[1] },
    [`etc/systemd/system/${d.unit}.service`]: '',
    'var/log/.keep': '',
  };
}

/**
 * upstream runtime-class-manager's k3s and rke2 fixtures: a base that renders `version = 2`
 * and nothing else, a template of `{{ template "base" . }}` alone. Paths and socket come from
 * containerd's flags, as k3s passes them (-a, --root, --state), not from the config.
 */
async function minimalBaseHost(d: Rancher, containerd: { major: number; binary: string }): Promise<FakeHost> {
  const flags = `--address ${d.socket} --root ${d.etc.replace('/etc/containerd', '/containerd')} --state ${path.dirname(d.socket)} `;
  const host = await bench.startHost({
    ...rancherFiles(d, containerd.binary),
    [`${d.etc.slice(1)}/base.toml`]: 'version = 2\n',
    [`${d.etc.slice(1)}/${templateOf(containerd.major)}`]: '{{ template "base" . }}\n',
  }, rancherInit(d, templateOf(containerd.major), flags));
  await serving(host, d);
  return host;
}

/** Waits until `ready()` (by default at once) and the distribution's containerd answers on its socket. */
async function serving(host: FakeHost, d: Rancher, ready: () => boolean = () => true): Promise<void> {
  await eventually(async () => {
    if (!ready()) return false;
    host.run([`${d.bin}/ctr`, '--address', d.socket, 'version']);
    return true;
  }, 20_000, () => `${d.bin}/containerd does not serve on ${d.socket}`, 200);
}

/** A path under the host's root, as this process sees it. */
const run = (host: FakeHost, p: string) => path.join(host.root, p);

/** The handler as the host's containerd reads its effective config. */
function effectiveHandler(host: FakeHost, d: Rancher, handler: string): any {
  const dumped = parse(host.run([`${d.bin}/containerd`, '--config', `${d.etc}/config.toml`, 'config', 'dump']));
  for (const plugin of ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime']) {
    const runtime = (dumped as any).plugins?.[plugin]?.containerd?.runtimes?.[handler];
    if (runtime) return runtime;
  }
  return undefined;
}

const RANCHER_CASES = [
  ...CONTAINERD_BINARIES.filter(c => c.version !== '1.7').map(c => ({ distro: 'k3s' as const, ...c })),
  ...CONTAINERD_BINARIES.filter(c => c.version === '1.7').map(c => ({ distro: 'rke2' as const, ...c })),
];

describe.each(RANCHER_CASES)('$distro with containerd $version only in its own folder', ({ distro, ...containerd }) => {
  test('the installer finds containerd there, edits the template of that version, restarts, and uninstalls', async () => {
    // GIVEN a node: containerd under the distribution's data folder, no template yet, nothing on PATH
    const d = RANCHER[distro];
    const host = await rancherHost(d, containerd);
    expect(() => host.run(['sh', '-c', 'command -v containerd || command -v ctr'])).toThrow();
    const pidBefore = fs.readFileSync(run(host, 'run/rancher-containerd.pid'), 'utf8');
    const template = containerd.major >= 2 ? 'config-v3.toml.tmpl' : 'config.toml.tmpl';
    const args = [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--restart=command', `--restart-command=${RESTART}`,
      '--retries=0', '--health-timeout=30'];

    // WHEN the shim is installed (distribution detected, no paths given)
    const install = await runBundle(bundle, 'install', [...args, `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);

    // THEN containerd was found and run from the distribution's folder, and told its version
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    expect(install.result).toMatchObject({
      outcome: 'installed',
      distro,
      containerdVersion: expect.stringMatching(new RegExp(`^${containerd.version.replace('.', '\\.')}\\.`)),
      paths: { config: `${d.etc}/${template}`, containerd: `${d.bin}/containerd` },
    });
    // AND the template of that version was written, rendered, and the restarted containerd serves the handler
    const templateFile = path.join(host.root, d.etc, template);
    expect(fs.readFileSync(run(host, 'run/rancher-containerd.pid'), 'utf8')).not.toBe(pidBefore);
    expect(effectiveHandler(host, d, 'rcmtest')).toMatchObject({ runtime_type: install.result.paths.binary });
    // AND the template starts from the distribution's base, not a frozen copy of today's rendering
    const written = fs.readFileSync(templateFile, 'utf8');
    expect(written.startsWith('{{ template "base" . }}\n# BEGIN runtime-class-manager handler rcmtest')).toBe(true);
    expect(written).not.toMatch(/^root = /m);
    // so a new base (an upgrade of the distribution) still reaches the node
    const base = path.join(host.root, d.etc, 'base.toml');
    fs.writeFileSync(base, fs.readFileSync(base, 'utf8').replace(/^oom_score = 0$/m, 'oom_score = -500'));
    const pidBeforeUpgrade = fs.readFileSync(run(host, 'run/rancher-containerd.pid'), 'utf8');
    host.run(['sh', '-c', RESTART]);
    await serving(host, d, () => fs.readFileSync(run(host, 'run/rancher-containerd.pid'), 'utf8') !== pidBeforeUpgrade);
    expect(fs.readFileSync(path.join(host.root, d.etc, 'config.toml'), 'utf8')).toMatch(/^oom_score = -500$/m);
    expect(effectiveHandler(host, d, 'rcmtest')).toMatchObject({ runtime_type: install.result.paths.binary });

    // WHEN it is uninstalled
    const uninstall = await runBundle(bundle, 'uninstall', args);
    // THEN containerd serves without the handler, and the template we created is gone
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(effectiveHandler(host, d, 'rcmtest')).toBeUndefined();
    expect(fs.existsSync(templateFile)).toBe(false);
    host.run([`${d.bin}/ctr`, '--address', d.socket, 'version']);
  }, 120_000);
});

test('k3s whose base imports a drop-in folder (containerd 2.1): a drop-in there, no template; uninstall leaves nothing', async () => {
  // GIVEN a k3s node whose rendered config imports config-v3.toml.d/*.toml
  const d = RANCHER.k3s;
  const c21 = CONTAINERD_BINARIES.find(c => c.version === '2.1')!;
  const host = await rancherHost(d, c21, `${d.etc}/config-v3.toml.d/*.toml`);
  const args = [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--restart=command', `--restart-command=${RESTART}`,
    '--retries=0', '--health-timeout=30'];
  // WHEN installing
  const install = await runBundle(bundle, 'install', [...args, `--location=${bench.shim.url}`]);
  // THEN the handler is in a drop-in of that folder, no template was made, and k3s's containerd serves it
  expect(install.stderr).not.toMatch(/ERROR/);
  expect(install.code).toBe(0);
  expect(install.result.paths.config).toBe(`${d.etc}/config-v3.toml.d/rcm-rcmtest.toml`);
  expect(fs.readdirSync(path.join(host.root, d.etc)).sort()).toEqual(['base.toml', 'config-v3.toml.d', 'config.toml']);
  expect(effectiveHandler(host, d, 'rcmtest')).toMatchObject({ runtime_type: install.result.paths.binary });
  // WHEN uninstalling THEN the drop-in and its folder are gone
  expect((await runBundle(bundle, 'uninstall', args)).code).toBe(0);
  expect(fs.readdirSync(path.join(host.root, d.etc)).sort()).toEqual(['base.toml', 'config.toml']);
  expect(effectiveHandler(host, d, 'rcmtest')).toBeUndefined();
}, 120_000);

/** containerd's own effective config of the rendered config.toml (`config dump`), parsed. */
function dumpOf(host: FakeHost, d: Rancher): any {
  return parse(host.run([`${d.bin}/containerd`, '--config', `${d.etc}/config.toml`, 'config', 'dump']));
}

/** A dump without `handler` in either schema's runtimes table. */
function withoutHandler(dumped: any, handler: string): any {
  const copy = structuredClone(dumped);
  for (const plugin of ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime']) delete copy.plugins?.[plugin]?.containerd?.runtimes?.[handler];
  return copy;
}

const MINIMAL_BASE_CASES = [
  { distro: 'k3s' as const, ...CONTAINERD_BINARIES.find(c => c.version === '1.6')! },
  { distro: 'rke2' as const, ...CONTAINERD_BINARIES.find(c => c.version === '1.7')! },
  { distro: 'k3s' as const, ...CONTAINERD_BINARIES.find(c => c.version === '2.1')! },
  { distro: 'k3s' as const, version: '2.4', major: 2, binary: stackBinary('containerd') },
];

describe.each(MINIMAL_BASE_CASES)('$distro on upstream\'s minimal base (a rendered `version = 2` alone), containerd $version', ({ distro, ...containerd }) => {
  test('containerd\'s dump after install differs by the handler alone (runc kept), after uninstall by nothing', async () => {
    // GIVEN the node as upstream's fixtures have it: the template holds the base directive alone
    const d = RANCHER[distro];
    const host = await minimalBaseHost(d, containerd);
    const templateFile = run(host, `${d.etc}/${templateOf(containerd.major)}`);
    const template = fs.readFileSync(templateFile, 'utf8');
    expect(fs.readFileSync(run(host, `${d.etc}/config.toml`), 'utf8')).toBe('version = 2\n');
    const before = dumpOf(host, d);
    const args = [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--restart=command', `--restart-command=${RESTART}`,
      '--retries=0', '--health-timeout=30'];

    // WHEN the shim is installed
    const install = await runBundle(bundle, 'install', [...args, `--location=${bench.shim.url}`]);

    // THEN containerd's own dump differs by the handler alone: on 1.x the written-out defaults keep runc
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    await serving(host, d);
    const after = dumpOf(host, d);
    expect(effectiveHandler(host, d, 'rcmtest')).toMatchObject({ runtime_type: install.result.paths.binary });
    expect(withoutHandler(after, 'rcmtest')).toEqual(before);

    // WHEN it is uninstalled THEN the template is what it was, and the dump is the one before
    const uninstall = await runBundle(bundle, 'uninstall', args);
    expect(uninstall.code).toBe(0);
    await serving(host, d);
    expect(fs.readFileSync(templateFile, 'utf8')).toBe(template);
    expect(dumpOf(host, d)).toEqual(before);
  }, 120_000);
});

test('k0s: containerd only in /var/lib/k0s/bin; the drop-in is written in the schema of that containerd', async () => {
  // GIVEN a k0s node (k0s reloads its drop-in folder itself: no restart)
  const c16 = CONTAINERD_BINARIES[0];
  const host = await bench.startHost({
    'var/lib/k0s/bin/containerd': { copy: c16.binary },
    'etc/k0s/containerd.d/.keep': '',
  });
  // WHEN installing
  const r = await runBundle(bundle, 'install', [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--retries=0', `--location=${bench.shim.url}`]);
  // THEN the host's containerd told the version, and reads the drop-in with the handler
  expect(r.stderr).not.toMatch(/ERROR/);
  expect(r.code).toBe(0);
  expect(r.result).toMatchObject({ distro: 'k0s', containerdVersion: expect.stringMatching(/^1\.6\./), configVersion: 2, paths: { containerd: '/var/lib/k0s/bin/containerd' } });
  const dumped: any = parse(host.run(['/var/lib/k0s/bin/containerd', '--config', '/etc/k0s/containerd.d/rcm-rcmtest.toml', 'config', 'dump']));
  expect(dumped.plugins['io.containerd.grpc.v1.cri'].containerd.runtimes.rcmtest.runtime_type).toBe(r.result.paths.binary);
  expect((await runBundle(bundle, 'uninstall', [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest'])).code).toBe(0);
  expect(fs.existsSync(path.join(host.root, 'etc/k0s/containerd.d/rcm-rcmtest.toml'))).toBe(false);
}, 60_000);

test('a host without containerd anywhere: refused with exit 4, naming where it looked, host untouched', async () => {
  const host = await bench.startHost({ 'etc/containerd/config.toml': 'version = 2\n' });
  const r = await runBundle(bundle, 'install', [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--retries=0',
    `--location=${bench.shim.url}`, '--restart=command', '--restart-command=true', '--health-timeout=2']);
  expect(r.stderr).toMatch(/containerd was not found on the host .*searched=\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin/);
  expect(r.code).toBe(4);
  expect(r.result.message).toMatch(/containerd not found on the host \(searched \/usr\/local\/sbin:/);
  expect(fs.readFileSync(path.join(host.root, 'etc/containerd/config.toml'), 'utf8')).toBe('version = 2\n');
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
}, 60_000);
