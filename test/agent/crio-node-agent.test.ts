import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { NodeAgent, runInstallerInProcess } from '../../src/agent/node-agent';
import { InstallResult } from '../../src/installer/install';
import { requestKey, resultKey } from '../../src/shared/agent-protocol';
import { Kube } from '../../src/shared/kube/kube';
import { Logger } from '../../src/shared/log';
import { ShimNodeLabels } from '../../src/shared/node-labels';
import { CrioHosts, served, systemctlCalls } from '../installer/crio-standins';
import { FakeHost } from '../support/fake-host';
import { ArtifactServer, publishShim, startArtifactServer } from '../support/installer-bundle';
import { NodeStandIn } from '../support/node-stand-in';
import { eventually } from '../support/rest';

// The node agent on a CRI-O node (install mode NodeAgent): the agent's own code, in this
// process, against a fake CRI-O host with the stand-ins of test/installer/crio-standins.ts
// (NO CRI-O RUNS HERE; the stand-in daemon serves crio.conf and crio.conf.d's files merged in
// lexical order, the last one winning). The Node object is a stand-in too: an in-memory node
// that applies the agent's merge patches and sends them back as watch events (no API server).
// What is proven: a request is carried out by the installer in process on CRI-O (drop-in,
// restart), `status` tells installed from drifted (our drop-in deleted, rewritten, replaced by
// another tool's, shadowed by a file CRI-O reads after it; the binary deleted or altered),
// and the agent's drift check takes the gate away on each, and not on an intact node.

jest.setTimeout(180_000);

const SHIM = 'rcmtest-shim';
const HANDLER = 'rcmtest';
const DROP_IN = 'etc/crio/crio.conf.d/99-rcm-rcmtest.conf';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-crio-agent-'));
const log = new Logger(false);
let server: ArtifactServer;
let artifact: { url: string; sha256: string };
let crio: CrioHosts;

function hostArgs(host: FakeHost): string[] {
  return [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--retries=0', '--health-timeout=5', '--set-gather=0'];
}

/** `status`, as the agent's drift check runs it (in process). */
const status = (host: FakeHost): Promise<InstallResult> => runInstallerInProcess(['status', `--handler=${HANDLER}`, ...hostArgs(host)], { PATH: process.env.PATH }, 'linux/amd64', log);
/** An install in process, as the agent runs a request (the controller admits one after a drift). */
const install = (host: FakeHost): Promise<InstallResult> => runInstallerInProcess(['install', `--handler=${HANDLER}`, ...hostArgs(host)],
  { PATH: process.env.PATH, RCM_LOCATION: artifact.url, RCM_SHA256: artifact.sha256 }, 'linux/amd64', log);

beforeAll(async () => {
  crio = new CrioHosts(work);
  server = await startArtifactServer();
  artifact = await publishShim(server, work);
});
afterAll(async () => {
  await crio?.stopAll();
  await server?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

test('the node agent on a CRI-O node: a request installed in process; status and the drift check catch each drift of the drop-in and binary', async () => {
  const host = await crio.host('1.29.1');
  const node = new NodeStandIn();
  const agent = new NodeAgent(node as unknown as Kube, { nodeName: 'n1', namespace: 'rcm', installerArgs: hostArgs(host), platform: 'linux/amd64', driftCheckSeconds: 0, progressReportSeconds: 60 }, log);
  const running = agent.start();
  try {
    await eventually(async () => node.watched, 10_000, () => 'the agent does not watch the node');
    // WHEN the controller admits an install of the Shim on the node
    node.apply({
      metadata: {
        annotations: {
          [requestKey(SHIM)]: JSON.stringify({
            name: 'rcmtest-shim-install-1',
            shimUid: 'uid-1',
            operation: 'install',
            handler: HANDLER,
            revision: '1',
            attempt: 1,
            batch: 'b1',
            createdAt: new Date().toISOString(),
            request: { command: 'install', handler: HANDLER, restart: 'systemd', location: artifact.url, sha256: artifact.sha256 },
          }),
        },
      },
    });
    // THEN the agent carries it out in process: our drop-in, one restart, the handler served
    const result = await eventually(async () => {
      const text = node.node.metadata.annotations[resultKey(SHIM)];
      const r = text ? JSON.parse(text) : undefined;
      return r?.phase === 'succeeded' || r?.phase === 'failed' ? r : undefined;
    }, 60_000, () => JSON.stringify(node.node.metadata.annotations));
    expect(result).toMatchObject({ phase: 'succeeded', result: { outcome: 'installed', exitCode: 0 } });
    expect(systemctlCalls(host)).toEqual(['restart crio']);
    const binary = served(host).crio.runtime.runtimes[HANDLER].runtime_path;
    expect(binary).toMatch(/^\/opt\/rcm\/shims\/rcmtest\/[0-9a-f]{16}\/containerd-shim-rcmtest-v2$/);
    expect(await status(host)).toMatchObject({ outcome: 'status', distro: 'crio', crioVersion: '1.29.1', installed: true, message: 'handler rcmtest is installed' });

    // The controller gates the node in; the drift check leaves an intact node alone.
    const gate = () => node.apply({
      metadata: {
        labels: { [ShimNodeLabels.handlerKey(SHIM)]: HANDLER },
        annotations: { [ShimNodeLabels.installedKey(SHIM)]: JSON.stringify([{ handler: HANDLER }]) },
      },
    });
    gate();
    await agent.checkDrift();
    expect(node.node.metadata.labels[ShimNodeLabels.handlerKey(SHIM)]).toBe(HANDLER);

    /** One drift: status reports it, the drift check drops the gate; then `repair` puts the node right and status is installed again. */
    const drift = async (message: RegExp, repair: () => Promise<void>) => {
      expect(await status(host)).toMatchObject({ installed: false, message: expect.stringMatching(message) });
      await agent.checkDrift();
      expect(node.node.metadata.labels[ShimNodeLabels.handlerKey(SHIM)]).toBeUndefined();
      expect(node.node.metadata.annotations[ShimNodeLabels.installedKey(SHIM)]).toBeUndefined();
      await repair();
      expect(await status(host)).toMatchObject({ installed: true });
      gate();
      await agent.checkDrift();
      expect(node.node.metadata.labels[ShimNodeLabels.handlerKey(SHIM)]).toBe(HANDLER);
    };
    const dropIn = path.join(host.root, DROP_IN);
    const written = fs.readFileSync(dropIn, 'utf8');
    const reinstalled = async (outcome = 'installed') => expect((await install(host)).outcome).toBe(outcome);
    /** The admin's reload: SIGHUP, which returns before CRI-O has read its files again (as systemd's `ExecReload=kill -HUP` does), so wait for what it serves. */
    const reloadUntilServed = async (runtimePath: string | undefined) => {
      host.run(['systemctl', 'reload', 'crio']);
      await eventually(async () => served(host).crio.runtime.runtimes[HANDLER]?.runtime_path === runtimePath, 10_000,
        () => `CRI-O does not serve runtime_path ${runtimePath} after the reload: ${JSON.stringify(served(host).crio.runtime.runtimes[HANDLER])}`);
    };

    // Our drop-in deleted: the install writes it again and restarts CRI-O.
    fs.rmSync(dropIn);
    await drift(/recorded as installed, but its drop-in \/etc\/crio\/crio.conf.d\/99-rcm-rcmtest.conf is missing$/, () => reinstalled());
    expect(fs.readFileSync(dropIn, 'utf8')).toBe(written);
    expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);

    // Our drop-in rewritten by someone (our first line kept, another runtime_path): CRI-O serves theirs until the install writes ours again.
    fs.writeFileSync(dropIn, written.replace(binary, '/usr/bin/other-shim'));
    await reloadUntilServed('/usr/bin/other-shim');
    await drift(/\/etc\/crio\/crio.conf.d\/99-rcm-rcmtest.conf does not name .*containerd-shim-rcmtest-v2 \(vm\) for it$/, () => reinstalled());
    expect(served(host).crio.runtime.runtimes[HANDLER].runtime_path).toBe(binary);

    // Replaced by another tool's file (no first line of ours): status says so; the install leaves that file alone (refused).
    const foreign = `[crio.runtime.runtimes.${HANDLER}]\nruntime_type = "vm"\nruntime_path = "/usr/bin/other-shim"\n`;
    fs.writeFileSync(dropIn, foreign);
    await drift(/99-rcm-rcmtest.conf is no longer the installer's drop-in$/, async () => {
      await expect(install(host)).rejects.toMatchObject({ reason: 'CrioHandlerRefused', message: expect.stringMatching(/99-rcm-rcmtest.conf exists and was not written by the installer/) });
      expect(fs.readFileSync(dropIn, 'utf8')).toBe(foreign);
      fs.writeFileSync(dropIn, written); // the admin puts ours back
    });

    // A file CRI-O reads after ours defines the handler too (the last one wins): CRI-O serves theirs.
    const later = path.join(host.root, 'etc/crio/crio.conf.d/99-zz-other.conf');
    fs.writeFileSync(later, foreign);
    await reloadUntilServed('/usr/bin/other-shim');
    expect(served(host).crio.runtime.runtimes[HANDLER]).toEqual({ runtime_type: 'vm', runtime_path: '/usr/bin/other-shim' });
    await drift(/\/etc\/crio\/crio.conf.d\/99-zz-other.conf defines handler rcmtest too and CRI-O reads it after \/etc\/crio\/crio.conf.d\/99-rcm-rcmtest.conf \(the last one wins\)/, async () => {
      await expect(install(host)).rejects.toMatchObject({ reason: 'CrioHandlerRefused', message: expect.stringMatching(/already defined by \/etc\/crio\/crio.conf.d\/99-zz-other.conf/) });
      fs.rmSync(later); // the admin removes theirs
      await reloadUntilServed(binary);
    });
    expect(served(host).crio.runtime.runtimes[HANDLER].runtime_path).toBe(binary);

    // The binary deleted, then altered: the install writes it again (the drop-in is unchanged: no restart).
    const calls = systemctlCalls(host).length;
    fs.rmSync(path.join(host.root, binary));
    await drift(/its binary .*containerd-shim-rcmtest-v2 is missing$/, () => reinstalled());
    fs.appendFileSync(path.join(host.root, binary), 'x');
    await drift(/its binary .*containerd-shim-rcmtest-v2 is damaged/, () => reinstalled());
    expect(systemctlCalls(host)).toHaveLength(calls);
    expect(fs.readFileSync(dropIn, 'utf8')).toBe(written);
  } finally {
    await agent.stop(10_000);
    await running;
  }
});
