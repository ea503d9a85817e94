// The node agent (install mode NodeAgent): the installer as a long-running process on its
// node. It watches its own Node object and its node's requests ConfigMap, runs every request
// the controller admitted there that has no outcome yet (all at once: they form one change set, one containerd restart),
// writes their outcomes back into the node record (one write per change set), and keeps the node true to what it
// installed (drift: a handler the config no longer registers, a binary missing or altered).
import { ChangeSetReports, mergedPatch, NodeReport } from './change-set-reports';
import { ExitCode, InstallerError } from '../installer/errors';
import { InstallResult, Installer } from '../installer/install';
import { InstallerOptions, parseOptions } from '../installer/options';
import {
  AdmittedRequest, AgentResult, HANDLER_NOT_REPORTED, handlerNotReportedMessage, KUBELET_REPORT_WAIT_MS, ownRecordOf, RecordPatch,
  requestAnnotationsOf, requestsConfigMapName, requestsOn, resultKey, runtimeHandlersOfStatus, withoutRequests,
} from '../shared/agent-protocol';
import { toEnv } from '../shared/installer-contract';
import { isNotFound, Kube } from '../shared/kube/kube';
import { Logger } from '../shared/log';
import { ShimNodeLabels } from '../shared/node-labels';

export interface AgentSettings {
  readonly nodeName: string;
  /** The namespace of the requests ConfigMaps (the agents' own). */
  readonly namespace: string;
  /** Installer flags of every run (host root, install root, config, socket...): they win over a request's. */
  readonly installerArgs: readonly string[];
  /** The node's platform (OS/ARCH), for per-platform artifacts. */
  readonly platform: string;
  /** How often the installed handlers are checked for drift; 0: never. */
  readonly driftCheckSeconds: number;
  /**
   * A request still under way after this many seconds is reported `running`; one done sooner
   * gets its outcome only (one write, and one watch event for the controller, per request).
   */
  readonly progressReportSeconds: number;
  /** How long an install waits for the kubelet to list its handler, where it lists any. @default KUBELET_REPORT_WAIT_MS */
  readonly kubeletReportWaitMs?: number;
}

/** A node as the agent reads it. */
interface NodeState {
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
  /** `status.runtimeHandlers` by name, where the kubelet reports any (Kubernetes 1.30+ with containerd 2.0+ or CRI-O 1.30+). */
  readonly runtimeHandlers?: readonly string[];
}

/** How often an install waiting for the kubelet to list its handler looks at the node as last seen. */
const KUBELET_POLL_MS = 500;

const HANDLER_LABEL = `.${ShimNodeLabels.DOMAIN}/handler`;
const INSTALLED_ANNOTATION = `.${ShimNodeLabels.DOMAIN}/installed`;

/** The reason of a request refused because another Shim holds its handler on the node. */
export const HANDLER_CLAIMED = 'HandlerClaimedByAnotherShim';

/**
 * Another Shim's claim, on this node, to the handler of `shim`'s request, as the node record
 * shows it: that Shim's record lists the handler installed, or it asked for the handler here
 * first (a request admitted earlier and not answered yet). The controller admits no such
 * request (the older Shim keeps a handler; an install waits for another Shim's uninstall), so
 * one that arrives comes from a controller with another view (a second controller, a stale
 * cache). It is refused with a reason, rather than the last writer replacing the other Shim's
 * binary or removing its handler. Undefined: no other claim.
 */
export function otherClaim(annotations: Readonly<Record<string, string>>, shim: string, admitted: AdmittedRequest): string | undefined {
  for (const [key, text] of Object.entries(annotations)) {
    if (!key.endsWith(INSTALLED_ANNOTATION)) continue;
    const owner = key.slice(0, -INSTALLED_ANNOTATION.length);
    if (owner === shim) continue;
    let entries: unknown;
    try {
      entries = JSON.parse(text);
    } catch {
      continue;
    }
    if (Array.isArray(entries) && entries.some(e => e?.handler === admitted.handler)) {
      return `handler ${admitted.handler} is installed on this node by Shim "${owner}"; the ${admitted.operation} of Shim "${shim}" would take it over`;
    }
  }
  for (const other of requestsOn(annotations)) {
    if (other.shim === shim || other.admitted.handler !== admitted.handler) continue;
    if (other.result && other.result.phase !== 'running') continue;
    const [theirs, ours] = [other.admitted, admitted];
    const first = theirs.createdAt < ours.createdAt || (theirs.createdAt === ours.createdAt && theirs.name < ours.name);
    if (first) return `Shim "${other.shim}" asked for handler ${admitted.handler} on this node first (${other.admitted.operation} ${other.admitted.name})`;
  }
  return undefined;
}

/**
 * Requests are started together once none came for a while: the installers then need no
 * gather window of their own (the agent passes --set-gather=0): they all announce themselves
 * at once, and the last to write its change restarts containerd for all. The controller
 * admits the requests one change causes (Shims deleted together, the gates a drift check
 * dropped, a node's agent becoming Ready) within one pass interval and one pass's own time of
 * each other (the requests say both: passIntervalMs, slowestPassMs), so the agent waits that
 * long and GATHER_MARGIN_MS more after the last; at most twice that (and GATHER_MAX_EXTRA_MS)
 * after the first, so that a steady trickle does not hold them for ever.
 */
export function gatherWindow(requests: readonly Pick<AdmittedRequest, 'passIntervalMs' | 'slowestPassMs'>[]): { quietMs: number; maxMs: number } {
  const interval = Math.max(0, ...requests.map(r => r.passIntervalMs ?? DEFAULT_PASS_INTERVAL_MS));
  const pass = Math.min(GATHER_SLOW_PASS_CAP_MS, Math.max(0, ...requests.map(r => r.slowestPassMs ?? 0)));
  const quietMs = interval + pass + GATHER_MARGIN_MS;
  return { quietMs, maxMs: 2 * quietMs + GATHER_MAX_EXTRA_MS };
}
/** What a controller that does not say its pass interval is assumed to use (its least). */
const DEFAULT_PASS_INTERVAL_MS = 1000;
/** A reconcile's own time beyond what the controller measured of its recent passes. */
const GATHER_MARGIN_MS = 500;
const GATHER_MAX_EXTRA_MS = 1000;
/**
 * The most a slow pass adds to the wait: a controller whose passes take longer (a rollout over
 * thousands of nodes writes its requests for a while) delays each change set no more than this.
 */
const GATHER_SLOW_PASS_CAP_MS = 10_000;

/**
 * One installer run in this process (no process start, as a Job's pod has): `argv` is the
 * command and its flags, over the RCM_* variables of `env`. The node agent runs every request
 * this way; bench/installer.bench.ts times it the same way.
 */
export function runInstallerInProcess(argv: string[], env: NodeJS.ProcessEnv, platform: string, log: Logger): Promise<InstallResult> {
  const options = parseOptions(argv, env, platform);
  if (options === 'help') throw new InstallerError(ExitCode.BAD_INPUT, 'InvalidInput', 'the request asks for help');
  return new Installer(options as InstallerOptions, log, true).run();
}

/**
 * A request's identity: its name and when it was admitted. The controller admits a request
 * again under its name (the same attempt) after a drift check dropped its gate, or after it
 * withdrew it: that is a new request, to be run again.
 */
function requestId(admitted: AdmittedRequest): string {
  return `${admitted.name}@${admitted.createdAt}`;
}

export class NodeAgent {
  /** Requests being carried out or waiting for their Shim's previous one, by requestId. */
  private readonly running = new Map<string, Promise<void>>();
  /** The last run of each Shim: its next request waits for it (a request withdrawn mid-run may be followed by another). */
  private readonly lastOfShim = new Map<string, Promise<void>>();
  /** Requests carried out here, by requestId, until the controller withdraws or replaces them: a node event that does not show the outcome yet must not start one again. */
  private readonly done = new Set<string>();
  /** Requests seen and not started yet (gathered for one change set), by requestId. */
  private readonly arriving = new Map<string, { shim: string; admitted: AdmittedRequest }>();
  private gatherTimer?: NodeJS.Timeout;
  private firstArrival?: number;
  /** The node and its requests, merged (the requests under requestKey(shim), as the controller's views have them). */
  private node?: NodeState;
  /** The Node as last read. */
  private nodeObject?: NodeState;
  /** The requests ConfigMap's data as last read (undefined: not read yet; {}: there is none). */
  private requestData?: Record<string, string>;
  private watch?: { done: Promise<void>; abort: () => void };
  private requestsWatch?: { done: Promise<void>; abort: () => void };
  private requestsRead!: Promise<void>;
  private stopped = false;
  private driftTimer?: NodeJS.Timeout;
  private checking?: Promise<void>;

  constructor(private readonly kube: Kube, private readonly settings: AgentSettings, private readonly log: Logger) {}

  private get nodePath(): string {
    return `/api/v1/nodes/${encodeURIComponent(this.settings.nodeName)}`;
  }

  /** Watches the node and its requests until stop(); restarts a watch when it ends or fails. */
  async start(): Promise<void> {
    if (this.settings.driftCheckSeconds > 0) {
      this.driftTimer = setInterval(() => void this.checkDrift(), this.settings.driftCheckSeconds * 1000);
    }
    let requestsRead!: () => void;
    this.requestsRead = new Promise(res => { requestsRead = res; });
    const watchingRequests = this.watchRequests(requestsRead);
    let checkedAtStart = false;
    while (!this.stopped) {
      try {
        const node = await this.kube.get(this.nodePath);
        this.onNode(node);
        // The installed handlers are checked as soon as the node record and the requests are
        // known (a handler being changed on purpose is not drift): an agent starts after every
        // reboot (a new containerd config, a wiped /opt), and in this install mode the
        // controller does not watch boot IDs: this check is what catches that.
        if (!checkedAtStart) {
          checkedAtStart = true;
          void this.requestsRead.then(() => this.checkDrift());
        }
        if (this.stopped) break;
        const selector = encodeURIComponent(`metadata.name=${this.settings.nodeName}`);
        this.watch = this.kube.watch(`/api/v1/nodes?watch=1&allowWatchBookmarks=true&fieldSelector=${selector}&resourceVersion=${node.metadata.resourceVersion}`,
          event => {
            if (event.type === 'ADDED' || event.type === 'MODIFIED') this.onNode(event.object);
          });
        await this.watch.done;
      } catch (e) {
        if (this.stopped) break;
        this.log.warn('watching the node failed; again in 2 s', { node: this.settings.nodeName, error: (e as Error).message });
        await new Promise(res => setTimeout(res, 2000));
      }
    }
    await watchingRequests;
  }

  /** Watches the node's requests ConfigMap (list, then watch from there) until stop(). `read`: called once it was first read. */
  private async watchRequests(read: () => void): Promise<void> {
    const ns = encodeURIComponent(this.settings.namespace);
    const selector = encodeURIComponent(`metadata.name=${requestsConfigMapName(this.settings.nodeName)}`);
    const path = `/api/v1/namespaces/${ns}/configmaps?fieldSelector=${selector}`;
    while (!this.stopped) {
      try {
        const list = await this.kube.get(path);
        this.onRequests(list.items?.[0]?.data ?? {});
        read();
        if (this.stopped) break; // stop() came while the list was read: no watch to abort
        this.requestsWatch = this.kube.watch(`${path}&watch=1&allowWatchBookmarks=true&resourceVersion=${list.metadata.resourceVersion}`, event => {
          if (event.type === 'ADDED' || event.type === 'MODIFIED') this.onRequests(event.object?.data ?? {});
          else if (event.type === 'DELETED') this.onRequests({});
        });
        await this.requestsWatch.done;
      } catch (e) {
        if (this.stopped) break;
        this.log.warn('watching the node\'s requests failed; again in 2 s', { node: this.settings.nodeName, error: (e as Error).message });
        await new Promise(res => setTimeout(res, 2000));
      }
    }
  }

  /** Stops taking requests and waits (at most `graceMs`) for those under way: a change in progress is finished. */
  async stop(graceMs = 60_000): Promise<void> {
    this.stopped = true;
    if (this.gatherTimer) clearTimeout(this.gatherTimer);
    this.watch?.abort();
    this.requestsWatch?.abort();
    if (this.driftTimer) clearInterval(this.driftTimer);
    await Promise.race([Promise.allSettled([...this.running.values(), this.checking]), new Promise(res => setTimeout(res, graceMs))]);
  }

  /** Requests of this node still being carried out (for tests and the health probe). */
  get busy(): number {
    return this.running.size;
  }

  private onNode(node: any): void {
    this.nodeObject = { labels: node.metadata?.labels ?? {}, annotations: node.metadata?.annotations ?? {}, ...runtimeHandlersOfStatus(node.status) };
    this.merge();
  }

  private onRequests(data: Record<string, string>): void {
    this.requestData = data;
    this.merge();
  }

  /** The node and its requests as one record; the requests that have no outcome yet are gathered. */
  private merge(): void {
    const node = this.nodeObject;
    if (!node) return;
    this.node = { ...node, annotations: { ...withoutRequests(node.annotations), ...requestAnnotationsOf(this.requestData) } };
    if (this.stopped) return;
    let added = false;
    const present = requestsOn(this.node.annotations);
    for (const id of [...this.done]) if (!present.some(r => requestId(r.admitted) === id)) this.done.delete(id);
    for (const { shim, admitted, result } of present) {
      // Done, or under way here. A result `running` that nobody here runs was left by an agent
      // that ended: the run is made again (an install is idempotent; the journal finishes or
      // undoes what it left).
      const id = requestId(admitted);
      if ((result && result.phase !== 'running') || this.running.has(id) || this.arriving.has(id) || this.done.has(id)) continue;
      this.arriving.set(id, { shim, admitted });
      added = true;
    }
    if (!added) return;
    // The controller admits a node's operations of several Shims up to a pass interval apart:
    // they are started together once no new one came for the gather window, so that they make
    // one change set (one containerd restart).
    this.firstArrival ??= Date.now();
    if (this.gatherTimer) clearTimeout(this.gatherTimer);
    const { quietMs, maxMs } = gatherWindow([...this.arriving.values()].map(a => a.admitted));
    const wait = Math.max(0, Math.min(quietMs, this.firstArrival + maxMs - Date.now()));
    this.gatherTimer = setTimeout(() => this.startArrived(), wait);
  }

  /** Starts every request gathered: at once, so that the installers' change set takes them all (one restart). */
  private startArrived(): void {
    const gatheredMs = this.firstArrival === undefined ? 0 : Date.now() - this.firstArrival;
    this.gatherTimer = undefined;
    this.firstArrival = undefined;
    const arrived = [...this.arriving.values()];
    this.arriving.clear();
    if (this.stopped) return;
    // Which requests made one change set, and how long they were gathered: a node that restarts
    // containerd twice for one change shows here which request came too late.
    this.log.info(`starting ${arrived.length} request(s) together`, { shims: arrived.map(a => a.shim), gatheredMs, ...gatherWindow(arrived.map(a => a.admitted)) });
    // Their outcomes go to the Node together: one write (one watch event) for the change set.
    const reports = new ChangeSetReports(arrived.map(a => requestId(a.admitted)), r => this.writeReports(r));
    // (taken once every request below is marked under way here: the write's own watch event must find them so)
    const taken = Promise.resolve().then(() => this.take(arrived));
    for (const { shim, admitted } of arrived) {
      // One Shim's requests run one after the other: the controller may withdraw a request the
      // agent has taken but not yet reported (its node went NotReady) and admit another later.
      const previous = this.lastOfShim.get(shim);
      const run: Promise<void> = Promise.all([previous, taken]).then(() => this.carryOut(shim, admitted, reports)).finally(() => {
        reports.leave(requestId(admitted));
        this.done.add(requestId(admitted));
        this.running.delete(requestId(admitted));
        if (this.lastOfShim.get(shim) === run) this.lastOfShim.delete(shim);
      });
      this.running.set(requestId(admitted), run);
      this.lastOfShim.set(shim, run);
    }
  }

  /**
   * Takes a change set: one write that reports every request of it `running`, before anything
   * on the node changes. The controller withdraws a request nobody has taken from a node whose
   * agent is not Ready, and the change set's own containerd restart can make this agent's pod
   * not Ready for a moment: taken only after a while, every request of the set was withdrawn,
   * its outcome dropped and the request admitted again, and run twice (seen on a fresh-clone CI
   * run's containerd 1.7 node). Taken first, it stays the agent's until its outcome.
   */
  private async take(arrived: Array<{ shim: string; admitted: AdmittedRequest }>): Promise<void> {
    const startedAt = new Date().toISOString();
    const reports: NodeReport[] = arrived.filter(a => this.stillRequested(a.shim, a.admitted)).map(({ shim, admitted }) => ({
      shim,
      request: admitted.name,
      phase: 'running',
      patch: { labels: {}, annotations: { [resultKey(shim)]: JSON.stringify({ name: admitted.name, admittedAt: admitted.createdAt, startedAt, phase: 'running' }) } },
      stillWanted: () => this.stillRequested(shim, admitted),
    }));
    if (reports.length === 0) return;
    await this.writeReports(reports).catch(e => this.log.warn('could not report a change set taken', { requests: reports.map(r => r.request), error: (e as Error).message }));
  }

  /** The node (as last seen) still holds this request. */
  private stillRequested(shim: string, admitted: AdmittedRequest): boolean {
    return requestsOn(this.node?.annotations ?? {}).some(r => r.shim === shim && requestId(r.admitted) === requestId(admitted));
  }

  /** Runs a request; its outcome goes to the Node with the rest of its change set (`reports`). */
  private async carryOut(shim: string, admitted: AdmittedRequest, reports: ChangeSetReports): Promise<void> {
    if (!this.stillRequested(shim, admitted)) {
      this.log.info('a request withdrawn before it started is not run', { shim, request: admitted.name });
      return;
    }
    const startedAt = new Date().toISOString();
    const reportOf = (r: Omit<AgentResult, 'name' | 'admittedAt' | 'startedAt'>, record?: RecordPatch): NodeReport => {
      const result: AgentResult = { name: admitted.name, admittedAt: admitted.createdAt, startedAt, ...r, ...(record ? { recorded: true } : {}) };
      return {
        shim,
        request: admitted.name,
        phase: result.phase,
        patch: { labels: record?.labels ?? {}, annotations: { ...record?.annotations, [resultKey(shim)]: JSON.stringify(result) } },
        // A progress report is written whatever happens next; an outcome only while the request stands.
        stillWanted: result.phase === 'running' ? () => true : () => this.stillRequested(shim, admitted),
      };
    };
    this.log.info(`${admitted.operation} of ${admitted.handler} admitted`, { shim, request: admitted.name, attempt: admitted.attempt });
    // `running` only for a run that takes a while: most end sooner (written in order: the
    // outcome waits for this write).
    let progress: Promise<void> | undefined;
    const progressTimer = setTimeout(() => {
      progress = this.writeReports([reportOf({ phase: 'running' })]).catch(e => this.log.warn('could not report a request under way', { request: admitted.name, error: (e as Error).message }));
    }, this.settings.progressReportSeconds * 1000);
    const outcomeReport = async (r: Omit<AgentResult, 'name' | 'admittedAt' | 'startedAt'>, record?: RecordPatch) => {
      clearTimeout(progressTimer);
      await progress;
      // Withdrawn while it ran: nobody waits for this outcome (the controller admits the
      // operation again, and an install found in place is `unchanged`); writeReports() checks
      // that before each attempt of its write. Checked here too: a withdrawn outcome does not
      // wait for its change set, nor holds up its Shim's next request meanwhile.
      const report = reportOf(r, record);
      if (!report.stillWanted()) {
        this.log.info('the request was withdrawn: its outcome is not reported', { shim, request: admitted.name, phase: report.phase });
        return;
      }
      await reports.report(requestId(admitted), report);
    };
    try {
      if (admitted.operation === 'uninstall') await this.noGateFor(shim, admitted.handler);
      const result = await this.runInstaller(shim, admitted);
      if (admitted.operation === 'install' && !(await this.listedByKubelet(admitted.handler, () => this.stillRequested(shim, admitted)))) {
        // Stopping: the next agent runs the request again (the install is then `unchanged`) and waits for the kubelet itself.
        clearTimeout(progressTimer);
        this.log.info('stopping while the kubelet does not list the handler yet: the outcome is left to the next agent', { shim, request: admitted.name });
        return;
      }
      await outcomeReport({
        phase: 'succeeded',
        finishedAt: new Date().toISOString(),
        result: { outcome: result.outcome, message: result.message, exitCode: ExitCode.SUCCESS },
      }, this.recordAfter(shim, admitted));
      this.log.info(result.message, { shim, request: admitted.name, outcome: result.outcome, timings: result.timings });
    } catch (e) {
      const err = e instanceof InstallerError ? e : new InstallerError(ExitCode.UNEXPECTED, 'InternalError', (e as Error).stack ?? String(e));
      this.log.error(err.message, { shim, request: admitted.name, reason: err.reason, exitCode: err.exitCode });
      await outcomeReport({
        phase: 'failed',
        finishedAt: new Date().toISOString(),
        result: { outcome: 'failed', reason: err.reason, message: err.message.split('\n')[0].slice(0, 1000), exitCode: err.exitCode },
      }).catch(r => this.log.error('could not report a failure', { request: admitted.name, error: (r as Error).message }));
    }
  }

  /**
   * Where the node's kubelet reports its runtime handlers, an install counts once it lists the
   * handler (what the runtime itself serves), within KUBELET_REPORT_WAIT_MS; else it failed.
   * The controller, which reads no Node status in this install mode, leaves this to the agent.
   * A node that reports none (Kubernetes before 1.30, containerd before 2.0) goes by the
   * installer's own check alone. False: the agent is stopping, and the kubelet has not listed it yet.
   * A request withdrawn meanwhile waits no longer (its outcome is not reported).
   */
  private async listedByKubelet(handler: string, stillWanted: () => boolean): Promise<boolean> {
    const wait = this.settings.kubeletReportWaitMs ?? KUBELET_REPORT_WAIT_MS;
    const deadline = Date.now() + wait;
    for (;;) {
      const listed = this.node?.runtimeHandlers;
      if (listed === undefined || listed.includes(handler) || !stillWanted()) return true;
      if (this.stopped) return false;
      if (Date.now() >= deadline) {
        throw new InstallerError(ExitCode.CONFIG_FAILED, HANDLER_NOT_REPORTED, handlerNotReportedMessage(handler, listed, wait));
      }
      await new Promise(res => setTimeout(res, KUBELET_POLL_MS));
    }
  }

  /**
   * A gate naming the handler an uninstall is about to remove goes first. The controller takes
   * it away before it admits the uninstall, so this writes nothing but where a late write put
   * it back (the outcome of an earlier request, written as the controller withdrew it): the
   * RuntimeClass must not select the node while its handler goes (I1).
   */
  private async noGateFor(shim: string, handler: string): Promise<void> {
    const key = ShimNodeLabels.handlerKey(shim);
    if (this.node?.labels[key] !== handler) return;
    this.log.warn('the gate of a handler being uninstalled is still up: it goes first', { shim, handler });
    try {
      await this.kube.mergePatch(this.nodePath, { metadata: { labels: { [key]: null } } });
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
  }

  /** The installer, in this process, with the request's flags and the agent's own (which win). */
  private runInstaller(shim: string, admitted: AdmittedRequest): Promise<InstallResult> {
    const request = admitted.request;
    const claim = otherClaim(this.node?.annotations ?? {}, shim, admitted);
    if (claim) throw new InstallerError(ExitCode.CONFIG_FAILED, HANDLER_CLAIMED, `${claim}: refused, nothing changed`);
    if (request.artifactFile !== undefined) {
      // An artifact in an image is copied out by a Job's init container; the agent pulls no images.
      throw new InstallerError(ExitCode.BAD_INPUT, 'ImageArtifactNeedsJobs',
        `the artifact of ${admitted.handler} is in an image (${request.artifactOrigin}); install mode NodeAgent fetches artifacts over HTTP(S) only: use install mode Jobs for it`);
    }
    const env = Object.fromEntries(toEnv(request).map(e => [e.name, e.value]));
    return runInstallerInProcess([request.command, ...this.settings.installerArgs], { ...process.env, ...env }, this.settings.platform, this.log);
  }

  /**
   * The record a success writes with its outcome (the request's `onSuccess`): that Shim's keys
   * only (ownRecordOf), and a gate only where it names the handler this request has just
   * installed and checked: the agent never opens the RuntimeClass to anything else (I1). A
   * record that does not pass is left whole to the controller, which writes it on seeing the
   * outcome (as for a failure, or an agent from before onSuccess).
   */
  private recordAfter(shim: string, admitted: AdmittedRequest): RecordPatch | undefined {
    const record = ownRecordOf(shim, admitted.onSuccess);
    if (!record) return undefined;
    const gate = record.labels[ShimNodeLabels.handlerKey(shim)];
    const installedHere = admitted.operation === 'install' && gate === admitted.handler && admitted.request.handler === admitted.handler;
    // Not even the gate the node has now: a drift check may take it away while this request
    // runs (the uninstall of a Shim's older handler keeps the newer one's gate), and writing
    // it back would open the RuntimeClass to a handler found broken.
    if (gate !== undefined && gate !== null && !installedHere) {
      this.log.warn('the record of this success names a gate this agent did not check; the controller writes it', { shim, request: admitted.name, gate });
      return undefined;
    }
    return record;
  }

  /**
   * Writes reports (each a result, with the Shim's record after it where given) in one patch,
   * trying again a few times (the API server may refuse a write under load: 429). A result
   * that never arrives is not lost for good: the request still shows no outcome, the
   * controller fails it after its deadline (NodeAgentDidNotAnswer) and admits it again (an
   * installed handler is then `unchanged`).
   */
  private async writeReports(reports: readonly NodeReport[]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      // An outcome (and the gate it may carry) of a request the controller withdrew meanwhile
      // is not written, however late: the controller may have taken the gate away and admitted
      // an uninstall since.
      const wanted = reports.filter(r => {
        if (r.stillWanted()) return true;
        this.log.info('the request was withdrawn: its outcome is not reported', { shim: r.shim, request: r.request, phase: r.phase });
        return false;
      });
      if (wanted.length === 0) return;
      reports = wanted;
      try {
        await this.kube.mergePatch(this.nodePath, mergedPatch(reports));
        return;
      } catch (e) {
        if (attempt >= 5 || isNotFound(e)) throw e;
        await new Promise(res => setTimeout(res, 200 * 2 ** attempt));
      }
    }
  }

  /**
   * Drift: a handler a Shim's gate label says is installed here, whose binary, payload or
   * config entry is no longer what was installed. The gate goes first (the RuntimeClass stops
   * selecting the node), with the handler's entry in the Shim's record: the controller then
   * admits the install again, within its rollout, and the agent repairs the node.
   */
  checkDrift(): Promise<void> {
    this.checking ??= this.findDrift().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  private async findDrift(): Promise<void> {
    const node = this.node;
    if (!node || this.stopped) return;
    const gates = Object.entries(node.labels).filter(([k]) => k.endsWith(HANDLER_LABEL))
      // A request of this handler without its outcome yet: the node is changing on purpose.
      .filter(([, handler]) => !requestsOn(node.annotations).some(r => r.admitted.handler === handler && (!r.result || r.result.phase === 'running')));
    let drifted = await this.drifted(gates);
    // The handlers are checked one after the other: a change that landed during the check (a
    // config management run writing the file) shows in the later ones only. Checked all again,
    // so that what one change did is dropped in one write and repaired in one change set.
    if (drifted.length > 0 && drifted.length < gates.length) drifted = await this.drifted(gates);
    if (drifted.length === 0) return;
    for (const { shim, handler, problem } of drifted) {
      this.log.warn(`drift: ${problem}; the gate goes and the controller installs ${handler} again`, { shim, handler });
    }
    // One patch for all: every Shim concerned then sees the same node event, and the controller
    // admits their repairs together (one change set, one containerd start), not a gate apart.
    await this.dropGates(drifted).catch(e => this.log.error('could not take the gates away', { handlers: drifted.map(d => d.handler), error: (e as Error).message }));
  }

  /** The gated handlers (label key, handler) that the installer's status does not find installed, and why. */
  private async drifted(gates: readonly [string, string][]): Promise<{ shim: string; handler: string; problem: string }[]> {
    const drifted: { shim: string; handler: string; problem: string }[] = [];
    for (const [key, handler] of gates) {
      let problem: string;
      try {
        const status = await runInstallerInProcess(['status', `--handler=${handler}`, ...this.settings.installerArgs], process.env, this.settings.platform, this.log);
        if (status.installed) continue;
        problem = status.message;
      } catch (e) {
        problem = (e as Error).message;
      }
      drifted.push({ shim: key.slice(0, -HANDLER_LABEL.length), handler, problem });
    }
    return drifted;
  }

  /** Removes these Shims' gate labels on this node and their handlers' entries from their records, in one patch. */
  private async dropGates(drifted: readonly { shim: string; handler: string }[]): Promise<void> {
    const labels: Record<string, null> = {};
    const annotations: Record<string, string | null> = {};
    for (const { shim, handler } of drifted) {
      const installedKey = ShimNodeLabels.installedKey(shim);
      let entries: any[] = [];
      try {
        entries = JSON.parse(this.node?.annotations[installedKey] ?? '[]');
      } catch {
        entries = [];
      }
      const kept = Array.isArray(entries) ? entries.filter(e => e?.handler !== handler) : [];
      labels[ShimNodeLabels.handlerKey(shim)] = null;
      labels[ShimNodeLabels.stateKey(shim)] = null;
      annotations[installedKey] = kept.length > 0 ? JSON.stringify(kept) : null;
    }
    try {
      await this.kube.mergePatch(this.nodePath, { metadata: { labels, annotations } });
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
  }
}
