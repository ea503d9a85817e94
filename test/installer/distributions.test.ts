import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { detectDistro, layoutFor } from '../../src/installer/host';
import { InstallerOptions, parseOptions } from '../../src/installer/options';

// Distributions are detected from the host's file system (a temp folder laid out like each).

const roots: string[] = [];
afterAll(() => roots.forEach(root => fs.rmSync(root, { recursive: true, force: true })));

function hostWith(paths: string[]): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-host-'));
  roots.push(root);
  for (const p of paths) {
    const full = path.join(root, p);
    if (p.endsWith('/')) {fs.mkdirSync(full, { recursive: true });} else {
      fs.mkdirSync(path.dirname(full), { recursive: true });
      fs.writeFileSync(full, '');
    }
  }
  return root;
}

function options(hostRoot: string, extra: string[] = []): InstallerOptions {
  const o = parseOptions(['install', '--handler=spin', '--location=https://e.com/s.tgz', `--host-root=${hostRoot}`, ...extra], {}, 'linux/amd64');
  if (o === 'help') throw new Error('unexpected help');
  return o;
}

test.each([
  ['plain containerd', ['etc/containerd/'], 1, { distro: 'containerd', config: '/etc/containerd/config.toml', unit: 'containerd', template: false }],
  ['k3s server, containerd 1', ['var/lib/rancher/k3s/agent/etc/containerd/'], 1,
    { distro: 'k3s', config: '/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl', effectiveConfig: '/var/lib/rancher/k3s/agent/etc/containerd/config.toml', unit: 'k3s', template: true, socket: '/run/k3s/containerd/containerd.sock' }],
  ['k3s agent, containerd 2', ['var/lib/rancher/k3s/agent/etc/containerd/', 'etc/systemd/system/k3s-agent.service'], 2,
    { distro: 'k3s', config: '/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl', unit: 'k3s-agent' }],
  ['rke2 server', ['var/lib/rancher/rke2/agent/etc/containerd/'], 1, { distro: 'rke2', unit: 'rke2-server', template: true }],
  ['k0s', ['etc/k0s/containerd.d/'], 1, { distro: 'k0s', config: '/etc/k0s/containerd.d/rcm-spin.toml', unit: undefined }],
  ['microk8s', ['var/snap/microk8s/current/args/'], 1, { distro: 'microk8s', config: '/var/snap/microk8s/current/args/containerd-template.toml', unit: 'snap.microk8s.daemon-containerd' }],
])('%s', (_what, paths, major, expected) => {
  const o = options(hostWith(paths));
  expect(layoutFor(o, detectDistro(o), major)).toMatchObject(expected);
});

test('an explicit --distro and --config win over detection', () => {
  const o = options(hostWith(['var/lib/rancher/k3s/agent/etc/containerd/']), ['--distro=containerd', '--config=/etc/custom/containerd.toml']);
  expect(detectDistro(o)).toBe('containerd');
  expect(layoutFor(o, 'containerd', 1)).toMatchObject({ config: '/etc/custom/containerd.toml', effectiveConfig: '/etc/custom/containerd.toml' });
});

test('host commands enter the host\'s init unless --host-pid names another host process', () => {
  expect(options(hostWith([])).hostPid).toBe(1);
  expect(options(hostWith([]), ['--host-pid=4242']).hostPid).toBe(4242);
  expect(() => options(hostWith([]), ['--host-pid=self'])).toThrow('--host-pid: "self" is not a process id');
  expect(() => options(hostWith([]), ['--host-pid=0'])).toThrow('--host-pid: "0" is not a process id');
});
