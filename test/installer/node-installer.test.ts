import { execFileSync, spawn } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { buildSync } from 'esbuild';
import * as tar from 'tar';
import { ContainerdDaemon, installerArgsFor, startContainerd } from '../support/containerd-daemon';
import { buildOciImage } from '../support/oci-image';
import { NODE_24 } from '../support/tools';

// rcm-node-installer against a real containerd 1.6 daemon, artifacts from a real HTTP
// server on 127.0.0.1 and a real shim (containerd-shim-runc-v2 under another name).

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-installer-'));
const INSTALLER = path.join(work, 'rcm-node-installer.js');
const IMAGE = 'docker.io/library/rcm-busybox:test';
let daemon: ContainerdDaemon;
let server: http.Server;
let base: string;
const artifacts: Record<string, Buffer> = {};

function sha(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

async function tarball(files: Record<string, { source?: string; link?: string }>, gnuTarArgs?: string[]): Promise<Buffer> {
  const dir = fs.mkdtempSync(path.join(work, 'tar-'));
  const out = path.join(work, `${path.basename(dir)}.tgz`);
  if (gnuTarArgs) {
    execFileSync('tar', ['-C', dir, '-czPf', out, ...gnuTarArgs]);
  } else {
    for (const [name, f] of Object.entries(files)) {
      const dest = path.join(dir, name);
      fs.mkdirSync(path.dirname(dest), { recursive: true });
      if (f.link) fs.symlinkSync(f.link, dest);
      else fs.copyFileSync(f.source!, dest);
    }
    await tar.c({ gzip: true, file: out, cwd: dir, portable: true }, Object.keys(files).map(n => n.split('/')[0]).filter((v, i, a) => a.indexOf(v) === i));
  }
  return fs.readFileSync(out);
}

interface Run {
  code: number;
  stderr: string;
  result: any;
}

function runInstaller(command: string, args: string[], env: NodeJS.ProcessEnv = {}, node = process.execPath): Promise<Run> {
  const resultFile = path.join(work, `result-${crypto.randomBytes(4).toString('hex')}.json`);
  return new Promise(resolve => {
    const child = spawn(node, [INSTALLER, command, `--result-file=${resultFile}`, ...args], { env: { PATH: process.env.PATH, ...env } });
    let stderr = '';
    child.stderr.on('data', d => { stderr += d; });
    child.on('exit', code => resolve({
      code: code ?? -1,
      stderr,
      result: fs.existsSync(resultFile) ? JSON.parse(fs.readFileSync(resultFile, 'utf8')) : undefined,
    }));
  });
}

function hostArgs(handler = 'rcmtest'): string[] {
  return installerArgsFor(daemon, handler);
}

/** Everything the installer may touch, to prove that a failure touched nothing. */
function hostSnapshot(): { config: string; installRoot: string[] } {
  const installRoot = path.join(daemon.dir, 'opt');
  const list = (d: string): string[] => (fs.existsSync(d) ? fs.readdirSync(d, { recursive: true }).map(String).sort() : []);
  return { config: fs.readFileSync(daemon.config, 'utf8'), installRoot: list(installRoot) };
}

function containerdPid(): string {
  return fs.readFileSync(path.join(daemon.dir, 'containerd.pid'), 'utf8').trim();
}

beforeAll(async () => {
  buildSync({ entryPoints: [path.join(__dirname, '..', '..', 'src', 'installer', 'main.ts')], bundle: true, platform: 'node', target: 'node20', outfile: INSTALLER, logLevel: 'error' });
  daemon = await startContainerd();
  const shimDir = path.join(work, 'shim');
  fs.mkdirSync(shimDir);
  const shim = path.join(shimDir, 'containerd-shim-rcmtest-v2');
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', shim);
  const shimV2 = path.join(shimDir, 'v2', 'containerd-shim-rcmtest-v2');
  fs.mkdirSync(path.dirname(shimV2));
  // A second version: the same shim with different bytes (a trailing byte is ignored by ELF loaders).
  fs.writeFileSync(shimV2, Buffer.concat([fs.readFileSync(shim), Buffer.from([0])]), { mode: 0o755 });
  artifacts['good.tgz'] = await tarball({ 'bin/containerd-shim-rcmtest-v2': { source: shim }, 'README.md': { source: '/etc/hostname' } });
  artifacts['good-v2.tgz'] = await tarball({ 'containerd-shim-rcmtest-v2': { source: shimV2 } });
  artifacts['other.tgz'] = await tarball({ 'containerd-shim-othertest-v2': { source: shim } });
  artifacts['containerd-shim-rcmtest-v2'] = fs.readFileSync(shim);
  artifacts['no-shim.tgz'] = await tarball({ 'containerd-shim-spin-v2': { source: shim }, 'LICENSE': { source: '/etc/hostname' } });
  const evilDir = path.join(work, 'evil', 'inner');
  fs.mkdirSync(evilDir, { recursive: true });
  fs.copyFileSync(shim, path.join(work, 'evil', 'containerd-shim-rcmtest-v2'));
  artifacts['dotdot.tgz'] = await tarball({}, ['-C', evilDir, '../containerd-shim-rcmtest-v2']);
  artifacts['symlink.tgz'] = await tarball({ 'containerd-shim-rcmtest-v2': { link: '/etc/passwd' } });

  let flaky = 0;
  server = http.createServer((req, res) => {
    const name = (req.url ?? '/').slice(1);
    if (name === 'slow') return; // never answers: the installer's timeout must fire
    if (name === 'flaky.tgz' && flaky++ === 0) {
      res.writeHead(503).end();
      return;
    }
    const body = artifacts[name === 'flaky.tgz' ? 'good.tgz' : name];
    if (!body) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-length': body.length }).end(body);
  });
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as any).port}`;

  await buildOciImage({ name: IMAGE, files: [{ source: '/usr/bin/busybox', target: '/bin/busybox' }], entrypoint: ['/bin/busybox'] }, path.join(work, 'image.tar'));
  daemon.ctr(['-n', 'rcm', 'images', 'import', path.join(work, 'image.tar')]);
}, 120_000);

afterAll(async () => {
  server?.closeAllConnections();
  server?.close();
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('install, run, uninstall on a real containerd', () => {
  test('installs the shim, containerd runs a container with it, uninstall restores the node', async () => {
    // GIVEN the node as it is
    const originalConfig = fs.readFileSync(daemon.config, 'utf8');
    const originalDump = execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
    const pidBefore = containerdPid();

    // WHEN the installer installs the shim
    const install = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, `--sha256=${sha(artifacts['good.tgz'])}`, '--runtime-option=BinaryName=/usr/sbin/runc']);

    // THEN it reports success with what it did, and containerd was restarted with the handler
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    expect(install.result).toMatchObject({ outcome: 'installed', exitCode: 0, configVersion: 2, distro: 'containerd', containerdVersion: expect.stringMatching(/^1\.6\./) });
    expect(Object.keys(install.result.timings)).toEqual(expect.arrayContaining(['downloadMs', 'verifyMs', 'configMs', 'restartMs', 'totalMs']));
    const binary: string = install.result.paths.binary;
    expect(binary).toMatch(new RegExp(`^${daemon.dir}/opt/rcm/shims/rcmtest/[0-9a-f]{16}/containerd-shim-rcmtest-v2$`));
    expect(fs.statSync(binary).mode.toString(8).slice(-3)).toBe('755');
    expect(containerdPid()).not.toBe(pidBefore);
    const dump = execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
    expect(dump).toContain(`runtime_type = "${binary}"`);
    expect(dump).toContain('BinaryName = "/usr/sbin/runc"');

    // AND a container runs under the installed binary
    daemon.ctr(['-n', 'rcm', 'run', '-d', '--runtime', binary, IMAGE, 'under-shim', '/bin/busybox', 'sleep', '30']);
    try {
      const info = JSON.parse(daemon.ctr(['-n', 'rcm', 'containers', 'info', 'under-shim']));
      expect(info.Runtime.Name).toBe(binary);
      const shimPids = execFileSync('pgrep', ['-f', '--', `^${binary} `], { encoding: 'utf8' }).trim().split('\n');
      expect(shimPids.length).toBeGreaterThan(0);
      expect(fs.readlinkSync(`/proc/${shimPids[0]}/exe`)).toBe(binary);
    } finally {
      daemon.ctr(['-n', 'rcm', 'tasks', 'kill', '-s', 'SIGKILL', 'under-shim']);
      await new Promise(r => setTimeout(r, 500));
      daemon.ctr(['-n', 'rcm', 'containers', 'delete', 'under-shim']);
    }

    // WHEN the same install runs again
    const pidAfterInstall = containerdPid();
    const again = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, `--sha256=${sha(artifacts['good.tgz'])}`, '--runtime-option=BinaryName=/usr/sbin/runc']);
    // THEN it is a no-op that does not restart containerd
    expect(again.result.outcome).toBe('unchanged');
    expect(containerdPid()).toBe(pidAfterInstall);

    // WHEN it is uninstalled
    const uninstall = await runInstaller('uninstall', hostArgs());
    // THEN the config is the original byte for byte, the files are gone, containerd serves
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(fs.readFileSync(daemon.config, 'utf8')).toBe(originalConfig);
    expect(execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' })).toBe(originalDump);
    expect(fs.existsSync(path.join(daemon.dir, 'opt', 'rcm', 'shims', 'rcmtest'))).toBe(false);
    expect(fs.existsSync(path.join(daemon.dir, 'opt', 'rcm', 'state', 'rcmtest.json'))).toBe(false);
    daemon.ctr(['version']);
  });

  test('a new version goes to a new path; a container on the old one keeps running', async () => {
    // GIVEN version 1 installed and a container running on it
    const v1 = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`]);
    expect(v1.stderr).toMatch(/NO SHA256 GIVEN/);
    const oldBinary = v1.result.paths.binary;
    daemon.ctr(['-n', 'rcm', 'run', '-d', '--runtime', oldBinary, IMAGE, 'old-version', '/bin/busybox', 'sleep', '60']);
    try {
      // WHEN version 2 is installed
      const v2 = await runInstaller('install', [...hostArgs(), `--location=${base}/good-v2.tgz`, `--sha256=${sha(artifacts['good-v2.tgz'])}`]);
      // THEN it lives at another path and the config points at it
      expect(v2.code).toBe(0);
      expect(v2.result.outcome).toBe('installed');
      expect(v2.result.paths.binary).not.toBe(oldBinary);
      expect(fs.readFileSync(daemon.config, 'utf8')).toContain(v2.result.paths.binary);
      expect(fs.readFileSync(daemon.config, 'utf8')).not.toContain(oldBinary);
      // AND the container started on version 1 still runs
      expect(daemon.ctr(['-n', 'rcm', 'tasks', 'ls'])).toMatch(/old-version\s+\d+\s+RUNNING/);
    } finally {
      daemon.ctr(['-n', 'rcm', 'tasks', 'kill', '-s', 'SIGKILL', 'old-version']);
      await new Promise(r => setTimeout(r, 500));
      daemon.ctr(['-n', 'rcm', 'containers', 'delete', 'old-version']);
      await runInstaller('uninstall', hostArgs());
    }
  });

  test('two installers at once (two shims) both end up configured', async () => {
    const [a, b] = await Promise.all([
      runInstaller('install', [...hostArgs('rcmtest'), `--location=${base}/good.tgz`]),
      runInstaller('install', [...hostArgs('othertest'), `--location=${base}/other.tgz`]),
    ]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const dump = execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
    expect(dump).toContain(a.result.paths.binary);
    expect(dump).toContain(b.result.paths.binary);
    await runInstaller('uninstall', hostArgs('rcmtest'));
    await runInstaller('uninstall', hostArgs('othertest'));
    expect(execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' })).not.toContain('/opt/rcm/');
  });

  test('a missing config file is created for the handler and removed again on uninstall', async () => {
    // GIVEN no config file at all
    const missing = path.join(daemon.dir, 'etc', 'containerd', 'absent.toml');
    const args = [...hostArgs(), `--config=${missing}`, '--restart=none'];
    // WHEN installing THEN the file declares its version and the handler, and containerd reads it
    const r = await runInstaller('install', [...args, `--location=${base}/good.tgz`]);
    expect(r.code).toBe(0);
    expect(r.result.changed).toContain(`created ${missing}: handler rcmtest`);
    const dump = execFileSync('containerd', ['--config', missing, 'config', 'dump'], { encoding: 'utf8' });
    expect(dump).toContain(`runtime_type = "${r.result.paths.binary}"`);
    expect(dump).toMatch(/\[plugins\."io\.containerd\.grpc\.v1\.cri"\.containerd\.runtimes\.runc\]/); // the defaults were kept
    // WHEN uninstalling THEN the file is gone again
    expect((await runInstaller('uninstall', args)).code).toBe(0);
    expect(fs.existsSync(missing)).toBe(false);
  });

  test('uninstalling a handler that was never installed changes nothing, even without an install root', async () => {
    // GIVEN a node where nothing is installed and the install root does not exist
    const installRoot = path.join(daemon.dir, 'opt', 'never');
    const before = hostSnapshot();
    const pid = containerdPid();
    // WHEN uninstalling THEN it reports not-installed, restarts nothing and creates nothing
    const r = await runInstaller('uninstall', [...hostArgs('nevertest'), `--install-root=${installRoot}`]);
    expect(r.stderr).not.toContain('ENOENT');
    expect(r.code).toBe(0);
    expect(r.result.outcome).toBe('not-installed');
    expect(containerdPid()).toBe(pid);
    expect(hostSnapshot()).toEqual(before);
    expect(fs.existsSync(installRoot)).toBe(false);
  });

  test('a bare binary artifact is accepted', async () => {
    const r = await runInstaller('install', [...hostArgs(), `--location=${base}/containerd-shim-rcmtest-v2`, '--restart=none']);
    expect(r.code).toBe(0);
    expect(path.basename(r.result.paths.binary)).toBe('containerd-shim-rcmtest-v2');
    await runInstaller('uninstall', [...hostArgs(), '--restart=none']);
  });

  test('downloads go through HTTP_PROXY, except for NO_PROXY hosts', async () => {
    // GIVEN a forwarding proxy on 127.0.0.1 that counts what it forwards
    let forwarded = 0;
    const proxy = http.createServer((req, res) => {
      forwarded++;
      http.get(req.url!, upstream => {
        res.writeHead(upstream.statusCode ?? 502, upstream.headers);
        upstream.pipe(res);
      }).on('error', () => res.writeHead(502).end());
    });
    await new Promise<void>(r => proxy.listen(0, '127.0.0.1', r));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as any).port}`;
    try {
      // WHEN the installer runs with HTTP_PROXY THEN the artifact comes through the proxy
      const via = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, '--restart=none'], { HTTP_PROXY: proxyUrl });
      expect(via.code).toBe(0);
      expect(forwarded).toBe(1);
      await runInstaller('uninstall', [...hostArgs(), '--restart=none']);
      // AND with the host in NO_PROXY it goes direct
      const direct = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, '--restart=none'], { HTTP_PROXY: proxyUrl, NO_PROXY: 'localhost,127.0.0.1' });
      expect(direct.code).toBe(0);
      expect(forwarded).toBe(1);
      await runInstaller('uninstall', [...hostArgs(), '--restart=none']);
    } finally {
      proxy.close();
    }
  });

  test('the bundle runs on Node.js 24 too (install and uninstall with a restart)', async () => {
    expect(fs.existsSync(NODE_24)).toBe(true); // provisioned by scripts/provision.sh
    const install = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, `--sha256=${sha(artifacts['good.tgz'])}`], {}, NODE_24);
    expect(install.code).toBe(0);
    expect(install.result.outcome).toBe('installed');
    const uninstall = await runInstaller('uninstall', hostArgs(), {}, NODE_24);
    expect(uninstall.result.outcome).toBe('uninstalled');
  });

  test('with a compile cache, as the image runs it: Node.js 24 starts from the cache; host commands do not inherit it', async () => {
    // GIVEN the bundle's compile cache, made as the image's build makes it
    const cache = path.join(work, 'compile-cache');
    const env = { NODE_COMPILE_CACHE: cache, NODE_COMPILE_CACHE_PORTABLE: '1' };
    await runInstaller('--help', [], env, NODE_24);
    expect(fs.readdirSync(cache, { recursive: true }).length).toBeGreaterThan(0);
    // WHEN an install runs with it, its restart command recording the environment it gets
    const seen = path.join(work, 'restart-env');
    const install = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, `--sha256=${sha(artifacts['good.tgz'])}`,
      `--restart-command=env > ${seen}; ${daemon.restartCommand}`], { ...env, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' }, NODE_24);
    // THEN Node.js took the bundle's code from the cache, and the host command saw none of it
    expect(install.code).toBe(0);
    expect(install.stderr).toMatch(/V8 code cache for CommonJS \S+ was accepted/);
    const restartEnv = fs.readFileSync(seen, 'utf8');
    expect(restartEnv).toMatch(/^PATH=/m);
    expect(restartEnv).not.toMatch(/NODE_COMPILE_CACHE/);
    expect((await runInstaller('uninstall', hostArgs(), env, NODE_24)).result.outcome).toBe('uninstalled');
  });

  test('inputs come from RCM_* environment variables too', async () => {
    const r = await runInstaller('status', [], { RCM_HANDLER: 'rcmtest', RCM_HOST_ROOT: '/', RCM_INSTALL_ROOT: path.join(daemon.dir, 'opt', 'rcm'), RCM_CONFIG: daemon.config, RCM_DISTRO: 'containerd' });
    expect(r.code).toBe(0);
    expect(r.result.outcome).toBe('status');
  });
});

describe('failures leave the node as it was', () => {
  const FETCH_FAILURES: [string, string[], number, RegExp][] = [
    ['a 404', ['--location=BASE/missing.tgz'], 3, /HTTP 404/],
    ['a timeout', ['--location=BASE/slow', '--download-timeout=1'], 3, /timed out/],
    ['a wrong sha256', ['--location=BASE/good.tgz', `--sha256=${'0'.repeat(64)}`], 3, /ChecksumMismatch|sha256 of .* is [0-9a-f]{64}, expected 0{64}/],
    ['a tar with a ../ entry', ['--location=BASE/dotdot.tgz'], 3, /unsafe path "..\/containerd-shim-rcmtest-v2"/],
    ['a tar with a symlink', ['--location=BASE/symlink.tgz'], 3, /SymbolicLink entry "containerd-shim-rcmtest-v2"/],
    ['a tar without the shim', ['--location=BASE/no-shim.tgz'], 3, /no containerd-shim-rcmtest-v<N>; it holds: .*containerd-shim-spin-v2/],
    ['an oversized artifact', ['--location=BASE/good.tgz', '--max-size=1000'], 3, /artifact too large/],
    ['a hostile handler', ['--location=BASE/good.tgz', '--handler=../../etc/x'], 2, /--handler: "..\/..\/etc\/x" is not a DNS label/],
    ['a handler that breaks TOML keys', ['--location=BASE/good.tgz', '--handler=a"]\nx'], 2, /is not a DNS label/],
    ['a hostile shim name', ['--location=BASE/good.tgz', '--shim-name=a/../../b'], 2, /--shim-name: "a\/..\/..\/b" is not a DNS label/],
    ['an ftp location', ['--location=ftp://127.0.0.1/x'], 2, /must be http\(s\)/],
    ['no artifact for the platform', ['--platform-location=linux/arm64=BASE/good.tgz', '--platform=linux/amd64'], 2, /no artifact for platform linux\/amd64 \(have: linux\/arm64\)/],
  ];

  test.each(FETCH_FAILURES)('%s', async (_what, args, exitCode, message) => {
    // GIVEN the node
    const before = hostSnapshot();
    const pid = containerdPid();
    // WHEN the install fails
    const r = await runInstaller('install', [...hostArgs(), ...args.map(a => a.replace('BASE', base))]);
    // THEN the exit code says why, the reason reaches the result file, nothing changed
    expect(r.code).toBe(exitCode);
    expect(r.stderr).toMatch(message);
    if (exitCode !== 2) expect(r.result).toMatchObject({ outcome: 'failed', exitCode });
    expect(hostSnapshot()).toEqual(before);
    expect(containerdPid()).toBe(pid);
  });

  test('a download that fails once is retried', async () => {
    const r = await runInstaller('install', [...hostArgs(), `--location=${base}/flaky.tgz`, '--restart=none']);
    expect(r.stderr).toMatch(/download failed, retrying.*HTTP 503/);
    expect(r.code).toBe(0);
    await runInstaller('uninstall', [...hostArgs(), '--restart=none']);
  });

  test('a restart that fails is rolled back and containerd serves the original config', async () => {
    // GIVEN a restart command that restarts containerd but reports failure while the new handler is configured
    const before = hostSnapshot();
    const breaking = `${daemon.restartCommand}; ! grep -q rcmtest ${daemon.config}`;
    // WHEN the install runs
    const r = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, `--restart-command=${breaking}`]);
    // THEN it rolled back, says so, and the node is as before
    expect(r.code).toBe(5);
    expect(r.result).toMatchObject({ outcome: 'failed', reason: 'RestartFailedRolledBack' });
    expect(hostSnapshot()).toEqual(before);
    await daemon.waitReady();
    expect(execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' })).not.toContain('rcmtest');
  });

  test('a restart that keeps failing is reported as needing a human', async () => {
    const r = await runInstaller('install', [...hostArgs(), `--location=${base}/good.tgz`, '--restart-command=exit 1']);
    expect(r.code).toBe(6);
    expect(r.result).toMatchObject({ outcome: 'failed', reason: 'RestartFailedNotRolledBack' });
    expect(r.result.message).toMatch(/needs a human/);
    // The previous config is back in place even so.
    expect(fs.readFileSync(daemon.config, 'utf8')).not.toContain('rcmtest');
  });
});
