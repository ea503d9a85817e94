import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { FakeHost, HostEntry, startFakeHost } from './fake-host';
import { ArtifactServer, buildInstaller, bundlePath, publishShim, startArtifactServer } from './installer-bundle';

// What most installer tests on a fake host set up the same way: a private folder, the
// installer bundle built into it, an artifact server on 127.0.0.1 and fake hosts
// (fake-host.ts), all made in beforeAll and gone after the tests of the file (or of the
// describe block it is called in).

/** The init of a fake host that runs nothing of its own (no containerd daemon). */
export const IDLE_INIT = 'while true; do sleep 1; done';

/** A containerd config (version 2) that configures runc only. */
export const RUNC_ONLY_CONFIG = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';

/** The installer's flags for a fake host with containerd in /usr/bin: handler `handler`, no restart, no retries. */
export function fakeHostArgs(host: FakeHost, handler = 'rcmtest'): string[] {
  return [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', `--handler=${handler}`, '--restart=none', '--retries=0'];
}

export interface InstallerBenchOptions {
  /** A folder of the test file's own (it removes it); otherwise one named `rcm-<name>-` is made here and removed after the tests. */
  readonly work?: string;
  /** With `work` not given: the folder's name. */
  readonly name?: string;
  /** Starts one fake host with these entries (and `init`), as `host`. */
  readonly host?: Record<string, HostEntry>;
  /** The init of `host`; IDLE_INIT by default. */
  readonly init?: string;
  /** Serves the test shim (publishShim) as `shim`. */
  readonly shim?: boolean;
}

export interface InstallerBench {
  /** The private folder. */
  readonly work: string;
  /** The installer bundle's path (built in beforeAll). */
  readonly bundle: string;
  /** The artifact server (from beforeAll on). */
  readonly server: ArtifactServer;
  /** The host of the `host` option (from beforeAll on). */
  readonly host: FakeHost;
  /** The test shim of the `shim` option (from beforeAll on). */
  readonly shim: { url: string; sha256: string };
  /** Starts a fake host that is stopped after the tests. */
  startHost(entries: Record<string, HostEntry>, init?: string): Promise<FakeHost>;
}

/** Registers the beforeAll and afterAll hooks of an installer bench; call it at the top of a test file or in a describe block. */
export function installerBench(options: InstallerBenchOptions): InstallerBench {
  const work = options.work ?? fs.mkdtempSync(path.join(os.tmpdir(), `rcm-${options.name ?? 'bench'}-`));
  const hosts: FakeHost[] = [];
  let server: ArtifactServer | undefined;
  let host: FakeHost | undefined;
  let shim: { url: string; sha256: string } | undefined;
  const ready = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`the installer bench has no ${what} (not asked for, or read before beforeAll)`);
    return value;
  };
  const startHost = async (entries: Record<string, HostEntry>, init = IDLE_INIT) => {
    const started = await startFakeHost(entries, init);
    hosts.push(started);
    return started;
  };

  beforeAll(async () => {
    buildInstaller(work);
    server = await startArtifactServer();
    if (options.shim) shim = await publishShim(server, work);
    if (options.host) host = await startHost(options.host, options.init);
  }, 60_000);
  afterAll(async () => {
    for (const h of hosts) await h.stop();
    await server?.close();
    if (!options.work) fs.rmSync(work, { recursive: true, force: true });
  });

  return {
    work,
    bundle: bundlePath(work),
    get server() { return ready(server, 'artifact server'); },
    get host() { return ready(host, 'host'); },
    get shim() { return ready(shim, 'shim'); },
    startHost,
  };
}
