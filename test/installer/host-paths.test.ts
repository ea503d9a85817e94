import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { HostPathError, resolveInHostRoot } from '../../src/installer/host-paths';

// Host paths are resolved the way the host resolves them. The oracle is the kernel itself:
// `chroot ROOT readlink -f PATH` (a static busybox copied into the fake host root) follows
// the same links with ROOT as /, which is what the node sees.

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-hostroot-'));
const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-outside-'));
afterAll(() => [root, outside].forEach(d => fs.rmSync(d, { recursive: true, force: true })));

function file(p: string, text = ''): void {
  fs.mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
  fs.writeFileSync(path.join(root, p), text);
}
function link(p: string, target: string): void {
  fs.mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
  fs.symlinkSync(target, path.join(root, p));
}

/** What the host's kernel makes of the path, as a path under the fake root. */
function kernelResolves(p: string): string {
  const onHost = execFileSync('chroot', [root, '/bin/busybox', 'readlink', '-f', p], { encoding: 'utf8' }).trim();
  return path.join(fs.realpathSync(root), onHost);
}

beforeAll(() => {
  file('bin/busybox');
  fs.copyFileSync('/bin/busybox', path.join(root, 'bin', 'busybox')); // statically linked
  fs.chmodSync(path.join(root, 'bin', 'busybox'), 0o755);
  // config management: the config is a link to the file it manages
  file('etc/containerd/real.toml', 'version = 2\n');
  link('etc/containerd/config.toml', '/etc/containerd/real.toml');
  link('etc/containerd/relative.toml', 'real.toml');
  link('etc/containerd/up-and-over.toml', '../managed/containerd.toml');
  file('etc/managed/containerd.toml');
  // a chain: absolute, then relative
  link('etc/chain-1.toml', '/etc/chain-2.toml');
  link('etc/chain-2.toml', 'containerd/real.toml');
  // a linked folder (k3s data dirs on another disk), and the install root's parent
  file('data/rancher/k3s/agent/etc/containerd/config.toml.tmpl');
  link('var/lib/rancher', '/data/rancher');
  file('var/opt/rcm/state/x.json');
  link('opt', 'var/opt');
  // links that would leave the host root if the pod's kernel followed them
  link('etc/escape-relative.toml', '../../../../../../../../etc/containerd/real.toml');
  link('etc/escape-absolute.toml', '/../../etc/containerd/real.toml');
  fs.writeFileSync(path.join(outside, 'secret'), 'not the host');
  link('etc/pod-path.toml', path.join(outside, 'secret'));
  // a link whose target does not exist yet, and a loop
  link('etc/containerd/dangling.toml', '/etc/containerd/not-yet/config.toml');
  link('etc/loop-a', '/etc/loop-b');
  link('etc/loop-b', 'loop-a');
});

test.each([
  '/etc/containerd/config.toml',
  '/etc/containerd/relative.toml',
  '/etc/containerd/up-and-over.toml',
  '/etc/chain-1.toml',
  '/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl',
  '/opt/rcm/state/x.json',
  '/etc/escape-relative.toml',
  '/etc/escape-absolute.toml',
  '/etc/containerd/../containerd/./config.toml',
])('%s resolves where the host kernel resolves it', p => {
  const resolved = resolveInHostRoot(root, p);
  expect(resolved).toBe(kernelResolves(p));
  expect(resolved.startsWith(fs.realpathSync(root) + '/')).toBe(true);
});

test('an absolute link into the pod\'s own file system stays inside the host root', () => {
  // The pod would read `outside/secret`; the host reads that path under its own /.
  expect(resolveInHostRoot(root, '/etc/pod-path.toml')).toBe(path.join(fs.realpathSync(root), outside, 'secret'));
});

test('a link to a file that does not exist yet names where that file goes, inside the host root', () => {
  expect(resolveInHostRoot(root, '/etc/containerd/dangling.toml')).toBe(path.join(fs.realpathSync(root), 'etc/containerd/not-yet/config.toml'));
  expect(resolveInHostRoot(root, '/opt/rcm/shims/new/bin')).toBe(path.join(fs.realpathSync(root), 'var/opt/rcm/shims/new/bin'));
});

test('a link loop is an error, as on the host', () => {
  expect(() => resolveInHostRoot(root, '/etc/loop-a')).toThrow(HostPathError);
  expect(() => resolveInHostRoot(root, '/etc/loop-a')).toThrow(/too many levels of symbolic links resolving \/etc\/loop-a/);
});

test('a missing host root is an error naming it', () => {
  expect(() => resolveInHostRoot(path.join(root, 'nope'), '/etc')).toThrow(/the host root .*nope cannot be used/);
});

test('with / as the host root it agrees with realpath', () => {
  const p = path.join(root, 'etc', 'containerd', 'relative.toml');
  expect(resolveInHostRoot('/', p)).toBe(fs.realpathSync(p));
});
