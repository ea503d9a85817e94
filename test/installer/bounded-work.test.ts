import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { FakeHost, startFakeHost } from '../support/fake-host';
import { ArtifactServer, buildInstaller, runBundle, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';

// Work is bounded in time and size, and happens before the host lock: a slow server, a
// proxy that never answers, a decompression bomb or an archive of countless files each end
// in exit 3 within the configured bounds, touch nothing on the host, and never delay another
// installer on the same node.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-bounded-'));
const CONFIG = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';
let bundle: string;
let server: ArtifactServer;
let host: FakeHost;
let silentProxy: net.Server;
const urls: Record<string, string> = {};
const trickles: NodeJS.Timeout[] = [];

beforeAll(async () => {
  bundle = buildInstaller(work);
  server = await startArtifactServer();
  const shim = shimBinary();
  urls.good = server.put('good.tgz', await tarGz(work, { 'containerd-shim-othertest-v2': shim }));
  // one byte every 0.5 s, for ever: never idle long enough for an idle timeout
  urls.slow = server.handle('slow.tgz', (_req, res) => {
    res.writeHead(200, { 'content-length': 1_000_000 });
    trickles.push(setInterval(() => res.write(Buffer.from([0x1f])), 500));
  });
  // 50 MB of zeros compress to about 50 KB
  const bomb = await tarGz(work, { 'containerd-shim-rcmtest-v2': shim, 'zeros.bin': Buffer.alloc(50_000_000) });
  urls.bomb = server.put('bomb.tgz', bomb);
  const many: Record<string, Buffer> = { 'containerd-shim-rcmtest-v2': shim };
  for (let i = 0; i < 1500; i++) many[`docs/${i}.txt`] = Buffer.from('x');
  urls.many = server.put('many.tgz', await tarGz(work, many));
  expect(bomb.length).toBeLessThan(shim.length + 500_000); // the zeros add next to nothing
  // accepts connections and never says a word
  silentProxy = net.createServer(() => undefined);
  await new Promise<void>(r => silentProxy.listen(0, '127.0.0.1', r));
  host = await startFakeHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': CONFIG }, 'while true; do sleep 1; done');
}, 120_000);

afterAll(async () => {
  trickles.forEach(clearInterval);
  await host?.stop();
  await server?.close();
  silentProxy?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

const args = (handler: string) => [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', `--handler=${handler}`,
  '--restart=none', '--retries=0'];

/** Everything under the host root but the kernel's folders. */
function listing(): string[] {
  return fs.readdirSync(host.root, { recursive: true }).map(String).filter(p => !/^(proc|sys|dev)(\/|$)/.test(p)).sort();
}

test.each([
  ['a server that trickles a byte every 0.5 s', () => [`--location=${urls.slow}`, '--download-timeout=2'], {}, 2000, /did not finish within 2000 ms/, 'DownloadFailed'],
  ['an HTTPS proxy that never answers CONNECT', () => ['--location=https://127.0.0.1:9/shim.tgz', '--download-timeout=2'],
    { HTTPS_PROXY: 'PROXY' }, 2000, /timed out|did not answer CONNECT/, 'DownloadFailed'],
  ['a decompression bomb (50 MB of zeros next to the shim)', () => [`--location=${urls.bomb}`, '--max-size=10000000', '--max-extracted-size=20000000'],
    {}, 0, /unpacks to more than 20000000 bytes \(--max-extracted-size\)/, 'ArchiveTooLarge'],
  ['an archive of 1500 files', () => [`--location=${urls.many}`], {}, 0, /unpacks to more than 1000 files \(--max-files\)/, 'ArchiveTooLarge'],
])('%s ends in exit 3 within its bound, host untouched', async (_what, extra, env: Record<string, string>, boundMs, message, reason) => {
  const before = listing();
  const proxyEnv = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === 'PROXY' ? `http://127.0.0.1:${(silentProxy.address() as net.AddressInfo).port}` : v]));
  const r = await runBundle(bundle, 'install', [...args('rcmtest'), ...extra()], proxyEnv);
  expect(r.code).toBe(3);
  expect(r.result).toMatchObject({ outcome: 'failed', reason });
  expect(r.stderr).toMatch(message);
  expect(r.ms).toBeLessThan(boundMs + 2500); // node's start and the fake host's detection included
  expect(listing()).toEqual(before);
}, 30_000);

test('a slow download does not hold the host lock: another handler installs meanwhile', async () => {
  // GIVEN an installer stuck downloading from a trickling server
  const slow = runBundle(bundle, 'install', [...args('rcmtest'), `--location=${urls.slow}`, '--download-timeout=6']);
  await new Promise(r => setTimeout(r, 1000));
  // WHEN another handler is installed on the same host meanwhile
  const other = await runBundle(bundle, 'install', [...args('othertest'), `--location=${urls.good}`]);
  // THEN it did not wait for the lock and finished while the first still downloads
  expect(other.code).toBe(0);
  expect(other.result.timings.lockWaitMs).toBeLessThan(500);
  const first = await slow;
  expect(first.code).toBe(3);
  expect(first.ms).toBeGreaterThan(other.ms);
  expect(first.ms).toBeLessThan(6000 + 2500);
  expect((await runBundle(bundle, 'uninstall', args('othertest'))).code).toBe(0);
  expect(fs.readFileSync(path.join(host.root, 'etc/containerd/config.toml'), 'utf8')).toBe(CONFIG);
}, 30_000);
