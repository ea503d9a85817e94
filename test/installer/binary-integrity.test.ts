import { spawn } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { fakeHostArgs, installerBench, RUNC_ONLY_CONFIG as CONFIG } from '../support/installer-bench';
import { runBundle, sha256, shimBinary, tarGz } from '../support/installer-bundle';

// The installed binary is what was verified, byte for byte, and on disk before the config
// names it. strace is the oracle of what reaches the disk (which files and folders are
// fsynced, in which order).

const bench = installerBench({ name: 'integrity', host: { 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': CONFIG } });
const { work, bundle } = bench;
let artifact: { url: string; sha256: string };
/** Downloads of the artifact, counted by the server. */
let downloads = 0;

beforeAll(async () => {
  const tgz = await tarGz(work, { 'containerd-shim-rcmtest-v2': shimBinary() });
  artifact = {
    url: bench.server.handle('shim.tgz', (_req, res) => {
      downloads++;
      res.writeHead(200, { 'content-length': tgz.length }).end(tgz);
    }),
    sha256: sha256(tgz),
  };
}, 60_000);

const args = () => [...fakeHostArgs(bench.host), `--location=${artifact.url}`, `--sha256=${artifact.sha256}`];
const onHost = (p: string) => path.join(bench.host.root, p);
const hashOf = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const config = () => fs.readFileSync(onHost('etc/containerd/config.toml'), 'utf8');

test('a truncated installed binary is found and rewritten, without touching the config or restarting', async () => {
  // GIVEN an installed shim whose binary was truncated to 0 bytes afterwards
  const install = await runBundle(bundle, 'install', args());
  expect(install.code).toBe(0);
  const binary = onHost(install.result.paths.binary);
  const configAfterInstall = config();
  fs.truncateSync(binary, 0);
  const status = await runBundle(bundle, 'status', args());
  expect(status.result).toMatchObject({ installed: false, message: expect.stringMatching(/its binary .* is damaged/) });

  // WHEN the same install runs again
  const before = downloads;
  const again = await runBundle(bundle, 'install', args());

  // THEN the artifact was downloaded again (the installed copy is no source any more), and the binary is the shim again, byte for byte, and nothing else changed
  expect(downloads - before).toBe(1);
  expect(again.code).toBe(0);
  expect(again.result.outcome).toBe('installed');
  expect(again.result.changed).toEqual([`repaired ${install.result.paths.binary}`]);
  expect(hashOf(binary)).toBe(sha256(shimBinary()));
  expect(config()).toBe(configAfterInstall);
  // AND once whole, the install is a no-op again
  expect((await runBundle(bundle, 'install', args())).result.outcome).toBe('unchanged');
  expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
}, 60_000);

test('a config rewritten without the handler (cloud-init, Ansible, an admin) is repaired from the intact installed copy: no download', async () => {
  // GIVEN an installed shim, and then the config written again by someone else, without our handler
  const install = await runBundle(bundle, 'install', args());
  expect(install.code).toBe(0);
  const binary = onHost(install.result.paths.binary);
  const configAfterInstall = config();
  fs.writeFileSync(onHost('etc/containerd/config.toml'), CONFIG);
  const status = await runBundle(bundle, 'status', args());
  expect(status.result).toMatchObject({ installed: false, message: expect.stringMatching(/does not name .* for it/) });

  // WHEN the same install runs again (what the controller admits after the drift check dropped the gate)
  const before = downloads;
  const again = await runBundle(bundle, 'install', args());

  // THEN the handler is in the config again, from the installed binary, which was not downloaded again nor rewritten
  expect(again.code).toBe(0);
  expect(again.result.outcome).toBe('installed');
  expect(downloads - before).toBe(0);
  expect(again.result.paths.binary).toBe(install.result.paths.binary);
  expect(again.result.changed.some((c: string) => c.includes(install.result.paths.binary))).toBe(false);
  expect(hashOf(binary)).toBe(sha256(shimBinary()));
  expect(config()).toBe(configAfterInstall);
  expect((await runBundle(bundle, 'status', args())).result.installed).toBe(true);

  // AND with another artifact asked for (a new sha256), the installed copy is no source: it is downloaded (and refused here, the bytes being the old ones)
  fs.writeFileSync(onHost('etc/containerd/config.toml'), CONFIG);
  const other = await runBundle(bundle, 'install', args().map(a => (a.startsWith('--sha256=') ? `--sha256=${'0'.repeat(64)}` : a)));
  expect(downloads - before).toBe(1);
  expect(other.result).toMatchObject({ outcome: 'failed', reason: 'ChecksumMismatch' });
  expect(config()).toBe(CONFIG);
  expect((await runBundle(bundle, 'install', args())).code).toBe(0);
  expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
}, 60_000);

test('a record of an older installer (no binary hash) is checked by installing again: no config change', async () => {
  const install = await runBundle(bundle, 'install', args());
  const stateFile = onHost('opt/rcm/state/rcmtest.json');
  const { binarySha256, ...older } = JSON.parse(fs.readFileSync(stateFile, 'utf8'));
  expect(binarySha256).toBe(sha256(shimBinary()));
  fs.writeFileSync(stateFile, JSON.stringify(older));
  const configAfterInstall = config();
  const again = await runBundle(bundle, 'install', args());
  expect(again.code).toBe(0);
  expect(again.result.changed).toEqual([]);
  expect(config()).toBe(configAfterInstall);
  expect(JSON.parse(fs.readFileSync(stateFile, 'utf8')).binarySha256).toBe(sha256(shimBinary()));
  expect((await runBundle(bundle, 'install', args())).result.outcome).toBe('unchanged');
  expect(install.code).toBe(0);
  expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
}, 60_000);

test('the binary and its folders are fsynced before the config that names it is written', async () => {
  // WHEN the installer runs under strace (every fsync, with the path of its descriptor)
  const trace = path.join(work, 'strace.log');
  const code = await new Promise<number | null>(resolve => {
    const child = spawn('strace', ['-f', '-qq', '-y', '-e', 'trace=fsync,rename', '-o', trace, process.execPath, bundle, 'install', ...args(),
      `--result-file=${path.join(work, 'traced.json')}`], { stdio: 'ignore', env: { PATH: process.env.PATH } });
    child.on('exit', resolve);
  });
  expect(code).toBe(0);
  const calls = fs.readFileSync(trace, 'utf8').split('\n').filter(l => /(fsync|rename)\(/.test(l));
  const root = fs.realpathSync(bench.host.root);
  const binary = JSON.parse(fs.readFileSync(path.join(work, 'traced.json'), 'utf8')).paths.binary as string;
  const index = (what: RegExp) => calls.findIndex(l => what.test(l));
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

  // THEN: the binary's data, its folder, and each new folder above it up to the install root...
  const binaryData = index(new RegExp(`fsync\\(\\d+<${esc(root + binary)}\\.rcm-tmp-\\d+>\\)`));
  const binaryFolder = index(new RegExp(`fsync\\(\\d+<${esc(root + path.dirname(binary))}>\\)`));
  const shimsFolder = index(new RegExp(`fsync\\(\\d+<${esc(root)}/opt/rcm/shims/rcmtest>\\)`));
  // ...come before the config's rename, and the config itself is fsynced with its folder, then the state
  const configRename = index(new RegExp(`rename\\("${esc(root)}/etc/containerd/config\\.toml\\.rcm-tmp-\\d+", "${esc(root)}/etc/containerd/config\\.toml"\\)`));
  const configFolder = index(new RegExp(`fsync\\(\\d+<${esc(root)}/etc/containerd>\\)`));
  const stateData = index(new RegExp(`fsync\\(\\d+<${esc(root)}/opt/rcm/state/rcmtest\\.json\\.rcm-tmp-\\d+>\\)`));
  for (const i of [binaryData, binaryFolder, shimsFolder, configRename, configFolder, stateData]) expect(i).toBeGreaterThanOrEqual(0);
  expect(binaryData).toBeLessThan(binaryFolder);
  expect(binaryFolder).toBeLessThan(configRename);
  expect(shimsFolder).toBeLessThan(configRename);
  expect(configRename).toBeLessThan(configFolder);
  expect(configFolder).toBeLessThan(stateData);
  expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
}, 60_000);
