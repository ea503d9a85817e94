import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { shimFileMatches } from '../../src/installer/artifact';
import { ContainerdDaemon, installerArgsFor, startContainerd } from '../support/containerd-daemon';
import { ArtifactServer, buildInstaller, runBundle, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';

// Upstream runtime-class-manager's manifests name a handler after its shim binary with the
// version in it (handler spin-v2 for containerd-shim-spin-v2, as its sample Shim does): such
// a manifest must install here as it does there.

test.each<[string, string, boolean]>([
  ['containerd-shim-spin-v2', 'spin', true],
  ['containerd-shim-spin-v2', 'spin-v2', true],
  ['containerd-shim-spin-v1', 'spin-v2', false],
  ['containerd-shim-spin-v2', 'spin-v', false],
  ['containerd-shim-spin-v2-v2', 'spin-v2', true],
  ['containerd-shim-wasmtime-v1', 'spin', false],
])('%s is the shim of %s: %s', (file, shimName, expected) => expect(shimFileMatches(file, shimName)).toBe(expected));

describe('an upstream-shaped handler name on a real containerd', () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-upstream-names-'));
  let daemon: ContainerdDaemon;
  let server: ArtifactServer;
  let bundle: string;
  beforeAll(async () => {
    bundle = buildInstaller(work);
    daemon = await startContainerd();
    server = await startArtifactServer();
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await daemon?.stop();
    fs.rmSync(work, { recursive: true, force: true });
  });

  test('handler spin-v2 installs the archive\'s containerd-shim-spin-v2, and uninstalls it', async () => {
    // GIVEN the upstream sample's shape: an archive holding containerd-shim-spin-v2, handler spin-v2
    const tgz = await tarGz(work, { 'containerd-shim-spin-v2': shimBinary() });
    const url = server.put('containerd-shim-spin-v2-linux-x86_64.tar.gz', tgz);
    const original = fs.readFileSync(daemon.config, 'utf8');
    // WHEN it is installed
    const r = await runBundle(bundle, 'install', [...installerArgsFor(daemon, 'spin-v2'), `--location=${url}`, `--sha256=${sha256(tgz)}`]);
    // THEN containerd serves handler spin-v2 with that binary
    expect({ code: r.code, reason: r.result?.reason, message: r.result?.message }).toMatchObject({ code: 0 });
    expect(path.basename(r.result.paths.binary)).toBe('containerd-shim-spin-v2');
    const dump = execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
    expect(dump).toMatch(/runtimes\.spin-v2\]/);
    expect(dump).toContain(r.result.paths.binary);
    // AND it uninstalls to the config as it was
    expect((await runBundle(bundle, 'uninstall', installerArgsFor(daemon, 'spin-v2'))).code).toBe(0);
    expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  }, 60_000);
});
