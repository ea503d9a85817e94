import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { isShimEntry, scanArchive, treeDigest, treeFiles, unpackPayload, unpackShim } from './artifact';
import { ChangeSets, isPending, Pending } from './change-set';
import {
  addRuntime, checkDropInVersion, checkVersionSupported, ConfigError, ConfigVersion, defaultRuntimesOf, detectConfigVersion, EditRecord,
  handlerBinary, hasBaseTemplate, inheritedCgroupOption, needsDefaultRuntimes, parseConfig, removeRuntime,
} from './containerd-config';
import { ContainerdRestart } from './containerd-restart';
import { CrioChange, CrioContext, crioDropInMissing, CrioRestart, crioVersion } from './crio-node';
import { elfHeadOf, elfProblem } from './elf';
import { ExitCode, InstallerError, configFailed, fetchFailed } from './errors';
import { download, takeLocal } from './fetch';
import {
  containerdVersion, ContainerdVersion, detectDistro, DistroLayout, HostContext, hostCommand, hostContext, layoutFor, onHost,
  removeAndPrune, sha256Of, withDropIn, writeAtomically,
} from './host';
import { hostLockPath, HostLockError, LockWaiters, withHostLock } from './host-lock';
import { HostPathError } from './host-paths';
import { findHostTool } from './host-tools';
import { ConfigBackups, Fetched, HostVersions, isPayload, payloadsDir, shimsDir, versionPaths } from './host-versions';
import { Journal } from './journal';
import { artifactFor, Distro, InstallerOptions } from './options';
import { preflight, PreflightContext } from './preflight';
import { InstallState, parseState } from './state';
import { pauseForTests } from './test-hooks';
import { Timer } from './timer';
import { Logger } from '../shared/log';

export type { InstallState } from './state';
export type { Fetched } from './host-versions';

export interface InstallResult {
  outcome: 'installed' | 'unchanged' | 'uninstalled' | 'not-installed' | 'status' | 'failed';
  exitCode: ExitCode;
  reason?: string;
  message: string;
  handler: string;
  changed: string[];
  paths: Record<string, string>;
  sha256?: string;
  containerdVersion?: string;
  /** CRI-O's version, on a CRI-O node. */
  crioVersion?: string;
  configVersion?: number;
  distro?: string;
  timings: Record<string, number>;
  state?: InstallState;
  /** status: the recorded install is all there (binary and handler). */
  installed?: boolean;
  /** status: handlers whose change an interrupted installer left for the next run to finish or undo. */
  interrupted?: string[];
  /** What is wrong with the state file, when it could not be used. */
  stateProblem?: string;
}

/** How often a written change waiting for the others of its set looks again (it releases the lock meanwhile). */
const SET_POLL_MS = 200;

/** A promise's outcome, kept until it is asked for (a rejection waiting there is not unhandled). */
type Settled<T> = { readonly value: T } | { readonly error: unknown };

function settle<T>(promise: Promise<T>): Promise<Settled<T>> {
  return promise.then(value => ({ value }), error => ({ error }));
}

function unwrap<T>(settled: Settled<T>): T {
  if ('error' in settled) throw settled.error;
  return settled.value;
}

/** An edit of containerd's config, computed and not yet written. */
interface EditPlan {
  /** The text edited (the file's, or the initial text of a file to create). */
  readonly current: string;
  readonly configVersion: ConfigVersion;
  /** Options the handler takes over from the node's default runtime (its cgroup driver). */
  readonly inherited: Record<string, string>;
  readonly edited: { text: string } & EditRecord;
}

/** The config imports other files (what containerd reads then is not this text alone). */
function importsFiles(text: string): boolean {
  const imports = parseConfig(text).imports;
  return imports !== undefined && !(Array.isArray(imports) && imports.length === 0);
}

/** A k3s/rke2 template that renders exactly the distribution's own config. */
const BASE_TEMPLATE = '{{ template "base" . }}\n';

/** A config without any setting but its version (what is left of a drop-in once our handler is out). */
function declaresNothing(text: string): boolean {
  return Object.keys(parseConfig(text)).every(key => key === 'version');
}

const PAYLOAD_PLACEHOLDER = '${PAYLOAD}';

/** The options as written: `${PAYLOAD}` replaced by the payload folder (a host path). */
function expandOptions(options: Record<string, string>, payloadDir: string | undefined): Record<string, string> {
  if (payloadDir === undefined) return options;
  return Object.fromEntries(Object.entries(options).map(([k, v]) => [k, v.split(PAYLOAD_PLACEHOLDER).join(payloadDir)]));
}

/** The state file, as a host path. */
function stateFile(o: InstallerOptions): string {
  return path.join(o.installRoot, 'state', `${o.handler}.json`);
}

function statePath(o: InstallerOptions): string {
  return onHost(o, stateFile(o));
}


/** The permission bits of a file (to write its replacement with the same). */
function permissions(file: string): number {
  return fs.statSync(file).mode % 0o1000;
}

function sameOptions(a: Record<string, string>, b: Record<string, string>): boolean {
  return JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
}

/** The record asks for the same handler shape as these options (type, handler fields). */
function sameHandlerShape(state: InstallState, o: InstallerOptions): boolean {
  return (state.runtimeType ?? undefined) === o.runtimeType && (state.payloadShim ?? undefined) === o.payloadShim
    && sameOptions(toStrings(state.handlerSettings ?? {}), toStrings(o.handlerSettings));
}

function toStrings(settings: object): Record<string, string> {
  return Object.fromEntries(Object.entries(settings).map(([k, v]) => [k, JSON.stringify(v)]));
}

export class Installer {
  private readonly timer = new Timer();
  private readonly changed: string[] = [];
  /** Something on the host was changed by this run: from then on SIGTERM lets it finish first. */
  private hostTouched = false;
  /** containerd answered on the host (its version is known): it can judge a candidate config. */
  private containerdFound = false;
  /** containerd's minor version on the host, when known. */
  private containerdMinor?: number;
  private containerdBuild?: string;
  /** What was wrong with the state file, if anything. */
  private stateProblem?: string;
  /** The host's namespaces and tool folders, once the distribution is known. */
  private host!: HostContext;
  /** containerd's default runtimes (`config default`), once asked. */
  private defaults?: Promise<Record<string, any> | undefined>;
  /** A candidate config that the preflight run ahead accepted (see judgeAhead). */
  private judged?: { readonly candidate: string; readonly binary: string; readonly containerd: string };
  /** This run among the installers of the node (its change's owner in the journal, its outcome's name). */
  private readonly id: string;
  /** The change is tried alone: a set with it was refused by containerd. */
  private solo = false;
  /** The host lock's file, in this process's view. */
  private lockFile?: string;
  /** containerd's restart and its checks (CRI-O's reload or restart on a CRI-O node), once the host is known. */
  private restart!: ContainerdRestart;
  /** On a CRI-O node: the change's CRI-O branch. */
  private crio?: CrioChange;
  /** The node's change sets (journals, outcomes), once the host is known. */
  private sets!: ChangeSets;
  /** This handler's versioned files on the host, once the host is known. */
  private versions!: HostVersions;
  private readonly backups: ConfigBackups;
  /** The installers whose changes are written (a live one's change set is open, not interrupted). */
  private members?: LockWaiters;
  private leaveMembers?: () => void;
  private withdrawComing?: () => void;
  /** When this run's change was written (it waits for the others' changes at most setWaitSeconds from then). */
  private joinedAt?: number;

  /**
   * @param embedded run inside a long-lived process (the node agent), which handles SIGTERM
   * itself: the run neither listens for it nor exits the process
   */
  constructor(private readonly o: InstallerOptions, private readonly log: Logger, private readonly embedded = false) {
    this.id = `${o.handler}-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
    this.backups = new ConfigBackups(o);
  }

  async run(): Promise<InstallResult> {
    // SIGTERM (the pod deleted): before the host was touched, stop at once (the kernel drops
    // the lock); after, finish the change, which is bounded by the health timeout; a SIGKILL
    // that follows is what the journal is for. An embedding process handles SIGTERM itself.
    const onTerm = () => {
      if (!this.hostTouched) {
        this.log.warn('SIGTERM before anything on the host changed: stopping');
        process.exit(ExitCode.TERMINATED);
      }
      this.log.warn('SIGTERM: finishing the change in progress first');
    };
    if (!this.embedded) process.on('SIGTERM', onTerm);
    try {
      return await this.runUnchecked();
    } catch (e) {
      // A host path that cannot be resolved inside the host root (a link loop, a missing host root).
      throw e instanceof HostPathError ? new InstallerError(ExitCode.CONFIG_FAILED, 'HostPathUnresolvable', e.message) : e;
    } finally {
      process.off('SIGTERM', onTerm);
    }
  }

  private async runUnchecked(): Promise<InstallResult> {
    const distro = detectDistro(this.o);
    this.host = hostContext(this.o, distro);
    // On a CRI-O node crio tells its version instead (runDetected).
    const detecting = this.timer.time('detect', () => (distro === 'crio' ? Promise.resolve(undefined) : containerdVersion(this.host)));
    // From its start, an install or uninstall is seen by the others on the node: the one whose
    // change is written first waits for the rest (bounded), so that containerd restarts once for all.
    const announced = this.o.command === 'status' ? undefined : this.announceComing();
    // An artifact the state file does not record is downloaded whatever the layout turns out to
    // be: that starts while containerd tells its version. A failed download is reported where it
    // was before, after the layout's own errors.
    const scratch = this.o.command === 'install' ? fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-fetch-')) : undefined;
    const early = scratch !== undefined && !this.recordedArtifact() ? settle(this.fetchArtifact(scratch)) : undefined;
    try {
      await announced;
      return await this.runDetected(distro, await detecting, scratch, early);
    } finally {
      this.withdrawComing?.();
      this.leaveMembers?.();
      if (scratch !== undefined) fs.rmSync(scratch, { recursive: true, force: true });
    }
  }

  private async runDetected(distro: Distro, version: ContainerdVersion | undefined, scratch: string | undefined,
    early: Promise<Settled<Fetched>> | undefined): Promise<InstallResult> {
    // CRI-O nodes: the same flow, with CRI-O's branch of the change (crio-node.ts).
    const crio = distro === 'crio' ? await this.timer.time('detect', () => crioVersion(this.host)) : undefined;
    if (!version && distro !== 'crio') {
      this.log.warn('containerd was not found on the host or did not tell its version; the config schema is guessed from the file',
        { distro, searched: this.host.searchPath.join(':') });
    }
    this.containerdMinor = version?.minor;
    this.containerdBuild = version?.build;
    this.containerdFound = version !== undefined;
    const layout = withDropIn(this.o, layoutFor(this.o, distro, version?.major), version?.major);
    onHost(this.o, layout.config); // a config path that cannot be resolved is refused before anything is touched
    const lock = onHost(this.o, hostLockPath(this.o.installRoot));
    this.lockFile = lock;
    this.members = new LockWaiters(lock, this.log, 'members');
    this.restart = distro === 'crio' ? new CrioRestart(this.o, this.host, this.log, this.timer, lock, crio) : new ContainerdRestart(this.o, this.host, this.log, this.timer, lock);
    this.sets = new ChangeSets(this.o, this.log, this.timer, this.restart, this.id, lock, this.members);
    this.versions = new HostVersions(this.o, this.log, this.changed, this.sets);
    if (distro === 'crio') this.crio = new CrioChange(this.crioContext(scratch), crio);
    const base: InstallResult = {
      outcome: 'failed',
      exitCode: ExitCode.SUCCESS,
      message: '',
      handler: this.o.handler,
      changed: this.changed,
      paths: { config: layout.config, state: stateFile(this.o), ...(version ? { containerd: version.binary } : {}) },
      containerdVersion: version?.text,
      ...(crio ? { crioVersion: crio.text } : {}),
      distro,
      timings: {},
    };
    // status only reads: it never waits for an installer at work.
    if (this.o.command === 'status') {
      const state = this.readState();
      const missing = state ? this.whatIsMissing(state) : undefined;
      const message = !state ? `handler ${this.o.handler} is not recorded as installed here`
        : missing ? `handler ${this.o.handler} is recorded as installed, but ${missing}` : `handler ${this.o.handler} is installed`;
      return {
        ...base,
        outcome: 'status',
        message,
        installed: !!state && !missing,
        state,
        stateProblem: this.stateProblem,
        interrupted: this.sets.handlers(),
        timings: this.timer.total(),
      };
    }
    // A unit systemd gave up on is reported before anything is fetched or touched.
    const unitChecked = settle(this.restart.refuseFailedUnit(layout));
    // Download and verify before taking the lock: a slow server holds up no other installer.
    let fetched: Fetched | undefined;
    if (early) {
      // Meanwhile containerd judges the config this install will most likely write.
      const ahead = settle(this.judgeAhead(layout, version?.major));
      const got = await early;
      await ahead; // it only reads (its candidate file is gone again), whatever it found
      fetched = unwrap(got);
    } else if (scratch !== undefined) {
      const state = this.readState();
      if (!this.upToDate(state, layout)) fetched = this.installedCopy(state) ?? await this.fetchArtifact(scratch);
    }
    unwrap(await unitChecked);
    const waiters = new LockWaiters(lock, this.log);
    const waitStarted = Date.now();
    let pending: Pending | undefined;
    try {
      for (;;) {
        const step = await withHostLock(lock, 10 * 60_000, this.log, async (): Promise<InstallResult | Pending> => {
          this.timer.timings.lockWaitMs ??= Date.now() - waitStarted;
          if (pending) return this.resume(pending, waiters, base, layout, version?.major, scratch, fetched);
          await this.recover();
          return this.change(base, layout, version?.major, scratch, fetched, waiters);
        }).catch(e => {
          throw e instanceof HostLockError ? new InstallerError(ExitCode.UNEXPECTED, 'HostLockUnavailable', e.message) : e;
        });
        if (!isPending(step)) return { ...step, timings: this.timer.total() };
        // Written and waiting for the set's restart: the lock again (after a moment for the
        // others to take it), then the outcome.
        if (!pending) this.log.info('the change is written; other installers on this node have changes coming: containerd restarts once for all of them', { set: step.journal.set });
        pending = step;
        await new Promise(res => setTimeout(res, SET_POLL_MS));
      }
    } finally {
      this.withdrawComing?.();
    }
  }

  /** Marks this run as coming with a change (see LockWaiters); withdrawn once its change is written or it ends. */
  private async announceComing(): Promise<void> {
    try {
      this.lockFile = onHost(this.o, hostLockPath(this.o.installRoot));
      this.withdrawComing = await new LockWaiters(this.lockFile, this.log).announce(this.id);
    } catch (e) {
      // Without the mark this run only misses a shared restart; the lock itself reports what is wrong.
      this.log.warn('could not announce this installer to the others on the node', { error: (e as Error).message });
    }
  }

  /** The run's own change (install or uninstall), under the host lock. */
  private change(base: InstallResult, layout: DistroLayout, major: number | undefined, scratch: string | undefined,
    fetched: Fetched | undefined, waiters: LockWaiters): Promise<InstallResult | Pending> {
    if (this.crio) return scratch !== undefined ? this.crio.install(base, layout, fetched, waiters) : this.crio.uninstall(base, layout, waiters);
    return scratch !== undefined ? this.install(base, layout, major, scratch, fetched, waiters) : this.uninstall(base, layout, major, waiters);
  }

  /**
   * A deferred change, back under the lock: the set's outcome if it has one, else the set is
   * still open (it restarts now unless yet another installer waits).
   */
  private async resume(pending: Pending, waiters: LockWaiters, base: InstallResult, layout: DistroLayout, major: number | undefined,
    scratch: string | undefined, fetched: Fetched | undefined): Promise<InstallResult | Pending> {
    const outcome = this.sets.outcomes().take(this.id);
    if (outcome?.kind === 'done') return pending.finish();
    if (outcome?.kind === 'failed') throw new InstallerError(outcome.exitCode, outcome.reason, outcome.message);
    const open = this.sets.open();
    if (!outcome && open.some(j => j.owner === this.id)) return this.sets.commit(pending, waiters, this.solo, this.joinedAt);
    // Rolled back: a set whose restart failed is retried change by change, so that one bad
    // change cannot take the others down; an interrupted set is retried as it came.
    this.solo = outcome?.kind === 'retry-alone';
    this.log.info(this.solo ? 'the change set containerd refused was rolled back: this change is tried again alone' : 'the change set was undone: this change is made again');
    this.changed.length = 0;
    await this.recover();
    return this.change(base, layout, major, scratch, fetched, waiters);
  }

  /** The state file records the artifact asked for (by its sha256): only then can it be installed already. */
  private recordedArtifact(): boolean {
    const state = this.readState();
    return !!state && this.o.sha256 === state.sha256;
  }

  /** The artifact given by its sha256 is installed and intact: nothing to download. */
  private upToDate(state: InstallState | undefined, layout: DistroLayout): boolean {
    return !!state && this.o.sha256 === state.sha256 && this.intact(state, layout);
  }

  /**
   * The artifact asked for, as this handler's installed version holds it, when that is intact
   * (the binary and payload hash to what the state recorded when they were written from a
   * verified download): a repair whose config entry went (rewritten by cloud-init, Ansible, an
   * admin) writes the entry again without downloading the artifact again. Undefined otherwise:
   * then it is downloaded and checked as for a first install.
   */
  private installedCopy(state: InstallState | undefined): Fetched | undefined {
    const o = this.o;
    if (!state || !o.sha256 || state.sha256 !== o.sha256 || state.binarySha256 === undefined) return undefined;
    if (o.artifactFile !== undefined || (o.payloadShim !== undefined) !== (state.payloadDir !== undefined)) return undefined;
    const name = path.basename(state.binary);
    if (versionPaths(o, state.sha256, name).binary !== state.binary) return undefined; // another install root or layout
    const binaryOnHost = onHost(o, state.binary);
    if (!fs.existsSync(binaryOnHost) || sha256Of(binaryOnHost) !== state.binarySha256) return undefined;
    let payload: Fetched['payload'];
    if (state.payloadDir) {
      const dir = onHost(o, state.payloadDir);
      if (!state.payloadDigest || !fs.existsSync(dir) || treeDigest(dir) !== state.payloadDigest) return undefined;
      payload = { dir, digest: state.payloadDigest };
    }
    const url = artifactFor(o);
    this.log.info('the installed copy of the artifact is intact: it is not downloaded again', { url, sha256: state.sha256, binary: state.binary });
    const apiVersion = Number(/-v(\d+)$/.exec(name)?.[1] ?? 2);
    const shim = { file: binaryOnHost, name, apiVersion, sha256: state.binarySha256 };
    return { url, sha256: state.sha256, binarySha256: state.binarySha256, shim, ...(payload ? { payload } : {}) };
  }

  /** Downloads, checks and unpacks the artifact in the installer's own file system: the host sees none of it. */
  private async fetchArtifact(scratch: string): Promise<Fetched> {
    const o = this.o;
    const url = o.artifactFile !== undefined ? o.artifactOrigin ?? o.artifactFile : artifactFor(o);
    if (!o.sha256) this.log.warn('NO SHA256 GIVEN: the artifact is installed without verification; set the Shim\'s sha256', { url });
    const artifact = path.join(scratch, 'artifact');
    const limits = { maxBytes: o.maxExtractedBytes, maxFiles: o.maxFiles };
    // A single shim's archive is checked as it downloads (one pass, the shim's bytes kept);
    // nothing of that pass counts before the sha256 below matched.
    const reader = o.payloadShim === undefined ? () => scanArchive(limits, isShimEntry(o.shimName)) : undefined;
    const fetched = await this.timer.time('download', () => (o.artifactFile !== undefined
      ? takeLocal(o.artifactFile, artifact, o.maxSizeBytes)
      : download(url, artifact, { timeoutMs: o.downloadTimeoutSeconds * 1000, retries: o.retries, maxSizeBytes: o.maxSizeBytes }, this.log, reader)));
    await this.timer.time('verify', () => {
      if (o.sha256 && fetched.sha256 !== o.sha256) {
        throw fetchFailed('ChecksumMismatch', `sha256 of ${url} is ${fetched.sha256}, expected ${o.sha256}`);
      }
    });
    const payload = o.payloadShim !== undefined
      ? await this.timer.time('verify', () => unpackPayload(artifact, scratch, o.payloadShim!, limits)) : undefined;
    const shim = payload?.shim ?? await this.timer.time('verify', () => unpackShim(artifact, o.shimName, url, limits, fetched.read));
    const unrunnable = elfProblem(shim.data ? shim.data.subarray(0, 20) : elfHeadOf(shim.file), o.platform);
    if (unrunnable) throw fetchFailed('ShimNotRunnable', `${shim.name} from ${url} cannot run on this node: ${unrunnable}`);
    const digest = payload ? await this.timer.time('verify', () => treeDigest(payload.dir)) : undefined;
    this.log.info('artifact verified', {
      url,
      sha256: fetched.sha256,
      bytes: fetched.bytes,
      binary: shim.name,
      ...(payload ? { payloadFiles: treeFiles(payload.dir).length } : {}),
    });
    const payloadPart = payload && digest ? { payload: { dir: payload.dir, digest } } : {};
    // The shim's own hash was taken as the archive was checked, when it came in one (the installed copy is checked against it).
    return { url, sha256: fetched.sha256, binarySha256: shim.sha256 ?? sha256Of(shim.file!), shim, ...payloadPart };
  }

  private async install(base: InstallResult, layout: DistroLayout, major: number | undefined, scratch: string,
    prefetched: Fetched | undefined, waiters: LockWaiters): Promise<InstallResult | Pending> {
    const o = this.o;
    await this.sets.finishOpenFirst(layout, this.solo);
    const state = this.readState();
    const configFile = onHost(o, layout.config);
    const configExists = fs.existsSync(configFile);
    const unchanged = (s: InstallState): InstallResult => ({
      ...base,
      outcome: 'unchanged',
      message: `handler ${o.handler} already installed from this artifact`,
      sha256: s.sha256,
      configVersion: s.configVersion,
      paths: { ...base.paths, binary: s.binary },
    });
    const inPlace = (s: InstallState) => (this.replacedContainerd(s) ? this.verifyWithNewContainerd(base, layout, s) : unchanged(s));
    if (state && o.sha256 === state.sha256 && this.intact(state, layout)) return inPlace(state);
    // Only when the record changed while this installer waited for the lock is it fetched here.
    const fetched = prefetched ?? this.installedCopy(state) ?? await this.fetchArtifact(scratch);
    const { url, shim } = fetched;
    if (state && fetched.sha256 === state.sha256 && this.intact(state, layout)) return inPlace(state);

    // The versioned path: a new version never overwrites a binary running pods use. A
    // payload is one folder per version; its shim is a file in it.
    const { binary, payloadDir } = this.versions.paths(fetched.sha256, shim.name);
    const { exists, damaged } = this.versions.inspect(fetched, binary, payloadDir);

    // The edit is computed and checked before anything on the host changes.
    const original = configExists ? fs.readFileSync(configFile, 'utf8') : undefined;
    let edited: { text: string } & EditRecord;
    let configVersion: ConfigVersion;
    let previousBinary = state?.binary;
    let inherited: Record<string, string>;
    try {
      const plan = await this.planEdit(layout, major, state, original, binary, payloadDir, true);
      ({ edited, configVersion, inherited } = plan);
      // Without a usable record, the config shows which of our versions is in use.
      previousBinary ??= this.ownBinaryIn(plan.current, configVersion);
      if (edited.text !== original && !this.judgedAhead(edited.text, binary)) {
        await this.timer.time('preflight', () => preflight(this.preflightContext(), layout, edited.text, binary));
      }
    } catch (e) {
      throw e instanceof ConfigError ? configFailed(e.message) : e;
    }

    // The same text again (a repaired binary, a lost record): no write, no restart.
    const configChanges = original === undefined || edited.text !== original;
    const mode = configExists ? permissions(configFile) : 0o644;
    // A drop-in folder that the main config names but nobody made yet goes again with our file.
    const folderCreated = !fs.existsSync(path.dirname(configFile));
    const newState: InstallState = {
      handler: o.handler,
      shimName: o.shimName,
      sha256: fetched.sha256,
      binarySha256: fetched.binarySha256,
      location: url,
      binary,
      runtimeOptions: o.runtimeOptions,
      inheritedOptions: inherited,
      ...(o.runtimeType ? { runtimeType: o.runtimeType } : {}),
      ...(Object.keys(o.handlerSettings).length > 0 ? { handlerSettings: o.handlerSettings } : {}),
      ...(payloadDir && fetched.payload ? { payloadShim: o.payloadShim, payloadDir, payloadDigest: fetched.payload.digest } : {}),
      distro: layout.distro,
      configFile: layout.config,
      configVersion,
      configCreated: state?.configCreated ?? original === undefined,
      configFolderCreated: state?.configFolderCreated ?? folderCreated,
      edit: state?.edit ?? { addedSeparator: edited.addedSeparator, addedVersionLine: edited.addedVersionLine },
      installedAt: new Date().toISOString(),
      ...(this.containerdBuild ? { containerdBuild: this.containerdBuild } : {}),
    };
    const stateText = JSON.stringify(newState, null, 2) + '\n';
    // A previous version's binary folder goes once the change is done (a payload's, once no process runs from it: collectPayloads).
    const replacesVersion = previousBinary !== undefined && previousBinary !== binary && !isPayload(o, previousBinary);

    // The intent first: an interrupted run is finished or undone by the next one.
    const journal: Journal | undefined = configChanges ? {
      handler: o.handler,
      operation: 'install',
      phase: 'prepared',
      layout,
      original: original ?? null,
      edited: edited.text,
      mode,
      binary,
      createdPaths: [...(exists ? [] : [payloadDir ?? path.posix.dirname(binary)]), ...(folderCreated ? [path.posix.dirname(layout.config)] : [])],
      removeWhenDone: replacesVersion ? [path.posix.dirname(previousBinary!)] : [],
      stateToWrite: { file: stateFile(o), text: stateText },
      ...(original !== undefined ? { backup: this.backups.path() } : {}),
      ...this.sets.membership(),
      startedAt: new Date().toISOString(),
    } : undefined;
    this.hostTouched = true;
    if (journal) {
      await this.joinMembers();
      this.sets.save(journal);
    }

    await this.versions.write(fetched, binary, payloadDir, exists, damaged);
    await pauseForTests('binary-written');

    const result: InstallResult = {
      ...base,
      outcome: 'installed',
      message: `handler ${o.handler} installed from ${url}`,
      sha256: fetched.sha256,
      configVersion,
      paths: { ...base.paths, binary },
      state: newState,
    };
    const finish = async (): Promise<InstallResult> => {
      this.versions.collectPayloads();
      this.backups.rotate();
      return result;
    };
    if (journal) {
      if (journal.backup) this.backups.save(original!, journal.backup);
      writeAtomically(configFile, edited.text, mode);
      this.changed.push(`${original === undefined ? 'created' : 'edited'} ${layout.config}: handler ${o.handler}`);
      this.sets.save({ ...journal, phase: 'config-written' });
      await pauseForTests('config-written');
      if (replacesVersion) this.changed.push(`removed previous version ${previousBinary}`);
      return this.sets.commit({ journal, result, finish }, waiters, this.solo, this.joinedAt);
    }
    // No config change (a repaired binary, a lost record): nothing for containerd to read again.
    writeAtomically(statePath(o), stateText, 0o600);
    await pauseForTests('state-written');
    if (replacesVersion) this.versions.remove(previousBinary!);
    return finish();
  }

  /**
   * The config edit for `binary`: the config's schema, the node's cgroup driver inherited
   * from its default runtime, and the text with our handler in it. Throws ConfigError.
   */
  private async planEdit(layout: DistroLayout, major: number | undefined, state: InstallState | undefined, original: string | undefined,
    binary: string, payloadDir: string | undefined, timed: boolean): Promise<EditPlan> {
    const o = this.o;
    const current = original ?? await this.initialConfig(layout);
    const rendered = layout.template ? this.renderedConfig(layout, current, major) : current;
    const configVersion = layout.dropInVersion ?? detectConfigVersion(rendered, major);
    checkVersionSupported(configVersion, major, this.containerdMinor);
    if (layout.dropInVersion !== undefined) checkDropInVersion(current, layout.dropInVersion, layout.config);
    const defaults = needsDefaultRuntimes(rendered, configVersion, major) ? await this.defaultRuntimes() : undefined;
    // The handler's pods use the node's cgroup driver unless the Shim's options say otherwise.
    const effectiveFile = onHost(o, layout.effectiveConfig);
    const effectiveText = layout.effectiveConfig !== layout.config && fs.existsSync(effectiveFile) ? fs.readFileSync(effectiveFile, 'utf8') : current;
    const inherited = inheritedCgroupOption(effectiveText, configVersion);
    const options = { ...inherited, ...expandOptions(o.runtimeOptions, payloadDir) };
    if (o.handlerSettings.snapshotter !== undefined && major === 1 && (this.containerdMinor ?? 0) < 7) {
      throw new ConfigError(`a per-handler snapshotter needs containerd 1.7 or later; this node runs ${major}.${this.containerdMinor}`);
    }
    const entry = o.runtimeType
      ? { handler: o.handler, runtimeType: o.runtimeType, runtimePath: binary, options, settings: o.handlerSettings }
      : { handler: o.handler, runtimeType: binary, options, settings: o.handlerSettings };
    const edit = () => addRuntime(current, configVersion, entry, defaults, this.owns(state));
    const edited = timed ? await this.timer.time('config', edit) : edit();
    return { current, configVersion, inherited, edited };
  }

  /** What the CRI-O branch (crio-node.ts) borrows of this flow: the artifact, its versioned paths, the record, the clean-up. */
  private crioContext(scratch: string | undefined): CrioContext {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    return {
      o: this.o,
      log: this.log,
      timer: this.timer,
      sets: this.sets,
      changed: this.changed,
      get solo() { return self.solo; },
      get joinedAt() { return self.joinedAt; },
      readState: () => this.readState(),
      intact: (state, layout) => this.intact(state, layout),
      fetch: () => this.fetchArtifact(scratch!),
      touched: () => { this.hostTouched = true; },
      verify: (layout, installs) => this.restart.verify(layout, installs),
      joinMembers: () => this.joinMembers(),
      versions: this.versions,
      backups: this.backups,
      expandOptions: payloadDir => expandOptions(this.o.runtimeOptions, payloadDir),
      cleanUp: () => {
        this.versions.collectPayloads();
        this.backups.rotate();
      },
      stateFile: () => stateFile(this.o),
    };
  }

  private preflightContext(): PreflightContext {
    return { options: this.o, host: this.host, log: this.log, containerdFound: this.containerdFound };
  }

  /**
   * The preflight, run ahead while the artifact downloads (it costs a `containerd config
   * dump`, some 40 ms): the candidate is computed from the config and the state as they are
   * now, for the binary path this artifact will most likely have (the path is the sha256
   * given and the shim's file name, which only the archive tells: the recorded one, or -v2).
   * It only counts if the edit computed under the host lock is the same text for the same
   * binary and the same containerd binary judges it: then containerd would say the same
   * again. Only a candidate that imports no other file is judged ahead (what another
   * installer writes meanwhile could change an imported file), and only a plain config (not
   * a template, nor a drop-in beside a main config, whose folder other installers write
   * to). Anything else, or any doubt, and the preflight runs under the lock as before. Its
   * refusals are not kept either: under the lock the preflight runs again and reports them.
   */
  private async judgeAhead(layout: DistroLayout, major: number | undefined): Promise<void> {
    const o = this.o;
    if (!o.sha256 || !this.containerdFound || layout.template || layout.effectiveConfig !== layout.config) return;
    const containerd = this.containerdIdentity();
    if (!containerd) return;
    const configFile = onHost(o, layout.config);
    const original = fs.existsSync(configFile) ? fs.readFileSync(configFile, 'utf8') : undefined;
    const state = this.readState();
    const { binary, payloadDir } = versionPaths(o, o.sha256, this.likelyShimFileName(state));
    const { edited } = await this.planEdit(layout, major, state, original, binary, payloadDir, false);
    if (edited.text === original || importsFiles(edited.text)) return;
    await this.timer.time('preflightAhead', () => preflight(this.preflightContext(), layout, edited.text, binary));
    this.judged = { candidate: edited.text, binary, containerd };
  }

  /** The preflight run ahead judged exactly this candidate (see judgeAhead). */
  private judgedAhead(candidate: string, binary: string): boolean {
    const judged = this.judged;
    if (!judged || judged.candidate !== candidate || judged.binary !== binary || judged.containerd !== this.containerdIdentity()) return false;
    this.log.info('containerd judged this very config while the artifact downloaded: the preflight stands');
    return true;
  }

  /** The shim's file name in the artifact, as far as is known before it is unpacked. */
  private likelyShimFileName(state: InstallState | undefined): string {
    const recorded = state && !isPayload(this.o, state.binary) ? path.posix.basename(state.binary) : undefined;
    const shimFile = new RegExp(`^containerd-shim-${this.o.shimName.replace(/[^a-z0-9-]/g, '')}-v[0-9]+$`);
    return recorded && shimFile.test(recorded) ? recorded : `containerd-shim-${this.o.shimName}-v2`;
  }

  /** Which containerd binary answers preflights (its host path and inode, size and time), or undefined. */
  private containerdIdentity(): string | undefined {
    const binary = findHostTool(this.host.hostRoot, this.host.searchPath, 'containerd');
    if (!binary) return undefined;
    try {
      const stat = fs.statSync(onHost(this.o, binary));
      return `${binary} ${stat.dev}:${stat.ino} ${stat.size} ${stat.mtimeMs}`;
    } catch {
      return undefined;
    }
  }

  private async uninstall(base: InstallResult, layout: DistroLayout, major: number | undefined,
    waiters: LockWaiters): Promise<InstallResult | Pending> {
    const o = this.o;
    await this.sets.finishOpenFirst(layout, this.solo);
    const state = this.readState();
    const configFile = onHost(o, state?.configFile ?? layout.config);
    const original = fs.existsSync(configFile) ? fs.readFileSync(configFile, 'utf8') : undefined;
    const notInstalled: InstallResult = { ...base, outcome: 'not-installed', message: `handler ${o.handler} is not installed here` };
    if (original === undefined && !state) return notInstalled;
    let removed = { text: original ?? '', removed: false };
    if (original !== undefined) {
      try {
        const version = state?.configVersion ?? detectConfigVersion(original, major);
        removed = await this.timer.time('config', () => removeRuntime(original, version, o.handler, state?.edit ?? {}, this.owns(state)));
      } catch (e) {
        throw e instanceof ConfigError ? configFailed(e.message) : e;
      }
    }
    const mode = original !== undefined ? permissions(configFile) : 0o644;
    if (removed.removed) {
      this.hostTouched = true;
      // Without a record, a drop-in named after our handler is ours when nothing but its version is left.
      // A template we created is ours again once only its base directive is left.
      const leftOver = removed.text.trim();
      const removable = state
        ? state.configCreated && (leftOver === '' || (layout.template && leftOver === BASE_TEMPLATE.trim()))
        : layout.ownFile === true && declaresNothing(removed.text);
      const journal: Journal = {
        handler: o.handler,
        operation: 'uninstall',
        phase: 'prepared',
        layout: { ...layout, config: state?.configFile ?? layout.config },
        original: original!,
        edited: removable ? null : removed.text,
        mode,
        createdPaths: [],
        removeWhenDone: [shimsDir(o), stateFile(o)],
        backup: this.backups.path(),
        ...this.sets.membership(),
        startedAt: new Date().toISOString(),
      };
      await this.joinMembers();
      this.sets.save(journal);
      this.backups.save(original!, journal.backup!);
      if (removable) {
        fs.rmSync(configFile, { force: true });
        const folder = path.dirname(configFile);
        if (state?.configFolderCreated && fs.readdirSync(folder).length === 0) fs.rmdirSync(folder);
      } else {
        writeAtomically(configFile, removed.text, mode);
      }
      this.changed.push(`removed handler ${o.handler} from ${state?.configFile ?? layout.config}`);
      this.sets.save({ ...journal, phase: 'config-written' });
      await pauseForTests('config-written');
      if (state) this.changed.push(`removed ${state.payloadDir ?? shimsDir(o)}`);
      const result: InstallResult = { ...base, outcome: 'uninstalled', message: `handler ${o.handler} uninstalled` };
      return this.sets.commit({
        journal,
        result,
        finish: async () => {
          this.versions.collectPayloads();
          this.backups.rotate();
          return result;
        },
      }, waiters, this.solo, this.joinedAt);
    }
    removeAndPrune(this.o, onHost(o, shimsDir(o)));
    removeAndPrune(this.o, statePath(o));
    if (state) this.changed.push(`removed ${state.payloadDir ?? shimsDir(o)}`);
    this.versions.collectPayloads();
    if (!state) return notInstalled;
    return { ...base, outcome: 'uninstalled', message: `handler ${o.handler} uninstalled` };
  }

  /**
   * The state file's record, or undefined when there is none or it cannot be used (said in
   * the log and the result): the caller then goes by what the config shows.
   */
  private readState(): InstallState | undefined {
    const file = statePath(this.o);
    if (!fs.existsSync(file)) return undefined;
    const parsed = parseState(fs.readFileSync(file, 'utf8'), this.o.handler, stateFile(this.o));
    if (parsed.problem && parsed.problem !== this.stateProblem) {
      this.stateProblem = parsed.problem;
      this.log.warn(`${parsed.problem}; ignoring it and going by what containerd's config shows`);
    }
    return parsed.state;
  }

  /**
   * Which runtime_types are ours: the binary the record names, or any under our shims folder.
   * It finds our handler where another tool's TOML round trip dropped our markers.
   */
  private owns(state: InstallState | undefined): (runtimeType: string) => boolean {
    const ours = [shimsDir(this.o) + '/', payloadsDir(this.o) + '/'];
    return runtimeType => runtimeType === state?.binary || ours.some(prefix => runtimeType.startsWith(prefix));
  }

  /** Marks this run as alive with a change written, until it ends (the kernel drops the mark with it). */
  private async joinMembers(): Promise<void> {
    this.leaveMembers ??= await this.members?.announce(this.id);
    this.withdrawComing?.();
    this.withdrawComing = undefined;
    this.joinedAt ??= Date.now();
  }

  /** Settles what interrupted installers left (change-set.ts); a run that did so has touched the host. */
  private async recover(): Promise<void> {
    const before = this.changed.length;
    await this.sets.recoverInterrupted(this.changed);
    if (this.changed.length > before) this.hostTouched = true;
  }

  /** The binary the config gives our handler, when it is one of ours (under our shims folder). */
  private ownBinaryIn(configText: string, version: ConfigVersion): string | undefined {
    const shim = handlerBinary(configText, version, this.o.handler);
    return shim !== undefined && (shim.startsWith(shimsDir(this.o) + '/') || isPayload(this.o, shim)) ? shim : undefined;
  }

  /** What of the recorded install is no longer on the host (the binary, or the handler in the config); undefined when all is there. */
  private whatIsMissing(state: InstallState): string | undefined {
    if (!fs.existsSync(onHost(this.o, state.binary))) return `its binary ${state.binary} is missing`;
    if (state.binarySha256 !== undefined && sha256Of(onHost(this.o, state.binary)) !== state.binarySha256) {
      return `its binary ${state.binary} is damaged (its sha256 is not the installed one's)`;
    }
    if (state.payloadDir && state.payloadDigest && treeDigest(onHost(this.o, state.payloadDir)) !== state.payloadDigest) {
      return `its payload ${state.payloadDir} is damaged or incomplete (its content is not the installed one's)`;
    }
    if (state.runtime === 'crio') return crioDropInMissing(this.o, state) ?? this.crio?.replacedProblem(state);
    const file = onHost(this.o, state.configFile);
    if (!fs.existsSync(file)) return `its config file ${state.configFile} is missing`;
    try {
      const shim = handlerBinary(fs.readFileSync(file, 'utf8'), state.configVersion, state.handler);
      if (shim !== state.binary) return `${state.configFile} does not name ${state.binary} for it`;
    } catch (e) {
      return `${state.configFile} cannot be read: ${(e as Error).message}`;
    }
    const replaced = this.replacedContainerd(state);
    return replaced ? `containerd was replaced since (${replaced.before} → ${replaced.now}): the handler has to be verified with it again` : undefined;
  }

  /** containerd is not the one the handler was installed (or last verified) with. */
  private replacedContainerd(state: InstallState): { before: string; now: string } | undefined {
    const [before, now] = [state.containerdBuild, this.containerdBuild];
    return before !== undefined && now !== undefined && before !== now ? { before, now } : undefined;
  }

  /**
   * The handler's files and config are in place, but containerd was replaced since (a package
   * upgrade, a new node image): containerd as it is now must read the config with the handler
   * in it (and serve, where this run restarts containerd) before the install counts. Nothing
   * is restarted: whoever replaced containerd restarts it, and the config it will read is the
   * one checked. A containerd that does not take the handler is a failure, with the node as it was.
   */
  private async verifyWithNewContainerd(base: InstallResult, layout: DistroLayout, state: InstallState): Promise<InstallResult> {
    const replaced = this.replacedContainerd(state)!;
    const problem = await this.timer.time('health', () => this.restart.verify(layout, [{ handler: state.handler, binary: state.binary }]));
    if (problem) {
      throw new InstallerError(ExitCode.CONFIG_FAILED, 'ReplacedContainerdRefusesHandler',
        `containerd was replaced (${replaced.before} → ${replaced.now}) and does not take handler ${state.handler}: ${problem}`);
    }
    const verified: InstallState = { ...state, containerdBuild: replaced.now };
    writeAtomically(statePath(this.o), JSON.stringify(verified, null, 2) + '\n', 0o600);
    this.changed.push(`verified handler ${state.handler} with containerd ${replaced.now} (installed with ${replaced.before})`);
    return {
      ...base,
      outcome: 'installed',
      message: `handler ${state.handler} verified with the containerd that replaced the one it was installed with`,
      sha256: state.sha256,
      configVersion: state.configVersion,
      paths: { ...base.paths, binary: state.binary },
      state: verified,
    };
  }

  /** Our block is still in the file and the binary it names is still there, byte for byte. */
  private intact(state: InstallState, layout: DistroLayout): boolean {
    const file = onHost(this.o, state.configFile);
    if (state.configFile !== layout.config || !fs.existsSync(file) || !fs.existsSync(onHost(this.o, state.binary))) return false;
    if (!sameOptions(state.runtimeOptions, this.o.runtimeOptions) || !sameHandlerShape(state, this.o)) return false;
    // The binary must still be the bytes installed (an older record, without the hash, is checked by installing again).
    if (state.binarySha256 === undefined || sha256Of(onHost(this.o, state.binary)) !== state.binarySha256) return false;
    if (state.payloadDir && (!state.payloadDigest || treeDigest(onHost(this.o, state.payloadDir)) !== state.payloadDigest)) return false;
    if (state.runtime === 'crio') return crioDropInMissing(this.o, state) === undefined;
    try {
      return handlerBinary(fs.readFileSync(file, 'utf8'), state.configVersion, state.handler) === state.binary;
    } catch {
      return false;
    }
  }

  private async initialConfig(layout: DistroLayout): Promise<string> {
    // k3s/rke2 render config.toml from the template, putting their own base config where it
    // says {{ template "base" . }}. A template that copied today's rendering would freeze it:
    // k3s upgrades would never change the node's base config again.
    return layout.template ? BASE_TEMPLATE : '';
  }

  /**
   * The config k3s/rke2 rendered from the template: what containerd reads, base included. Without
   * it, on containerd 1.x, whether the base declares runc (so whether it must be written out) is unknown.
   */
  private renderedConfig(layout: DistroLayout, template: string, major: number | undefined): string {
    const file = onHost(this.o, layout.effectiveConfig);
    if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8');
    if (hasBaseTemplate(template) && !(major !== undefined && major >= 2)) {
      throw new ConfigError(`${layout.effectiveConfig} is missing: what the template's base renders (containerd's default runtimes or not) `
        + `cannot be read; start ${layout.distro} once so that it renders its config, and retry`);
    }
    return template;
  }

  private async defaultRuntimes(): Promise<Record<string, any> | undefined> {
    // Asked once per run: a preflight run ahead and the edit under the lock may both need them.
    this.defaults ??= hostCommand(this.host, ['containerd', 'config', 'default'], 30_000).then(r => {
      if (r.code !== 0) throw configFailed(`cannot read containerd's default runtimes (containerd config default: ${r.stderr.trim()})`);
      return defaultRuntimesOf(r.stdout);
    });
    return this.defaults;
  }
}
