// CRI-O nodes (issue 23): the side effects around crio-config.ts's pure functions. The
// install flow's CRI-O branch (Installer.change hands CRI-O layouts here): our drop-in file
// is written under the same host lock, journal and change sets as a containerd edit, and
// CRI-O is restarted (paced like containerd) once per set, then asked (`crio status config`)
// whether it serves every handler of the set. Not reloaded: a handler a reload (SIGHUP) adds is
// listed but cannot run a pod (crioApplyBy says why; the reload branch below serves a version
// known to fix that, none yet).
//
// Run against a real CRI-O 1.34.0 under a kubelet and systemd (test/e2e-multinode/crio.test.ts:
// an `oci` handler installed, repaired, uninstalled); the rest (refusals, rollbacks, a replaced
// CRI-O, other versions) at the level of files and commands, on fake hosts with stand-ins for
// crio and systemctl (test/installer/crio-hosts.test.ts, crio-drift.test.ts).
import * as fs from 'fs';
import * as path from 'path';
import { ChangeSets, Pending } from './change-set';
import { ConfigError } from './containerd-config';
import { ContainerdRestart, HandlerCheck } from './containerd-restart';
import {
  crioApplyBy, crioBinaryNameProblem, crioConflicts, crioDropIn, crioHandlerFor, CRIO_DROPIN_DIR, CRIO_MAIN_CONFIG, crioServedHandler, crioShadowing,
  CrioVersion, isOurDropIn, parseCrioVersion, CrioHandler,
} from './crio-config';
import { ExitCode, InstallerError } from './errors';
import { DistroLayout, HostContext, hostCommand, onHost, removeAndPrune, writeAtomically } from './host';
import { LockWaiters } from './host-lock';
import { hostSearchPath } from './host-tools';
import { ConfigBackups, Fetched, HostVersions, shimsDir } from './host-versions';
import type { InstallResult } from './install';
import { InstallerOptions } from './options';
import { CrioInstallState, InstallState } from './state';
import { pauseForTests } from './test-hooks';
import { Timer } from './timer';
import { Logger } from '../shared/log';

/** A CRI-O handler refused before anything on the host changed (exit 4). */
export const crioRefused = (message: string) => new InstallerError(ExitCode.CONFIG_FAILED, 'CrioHandlerRefused', message);

/** CRI-O's version on the host (`crio --version`), or undefined when crio is not there or does not tell. */
export async function crioVersion(host: HostContext): Promise<CrioVersion | undefined> {
  const r = await hostCommand(host, ['crio', '--version'], 20_000);
  return r.code === 0 ? parseCrioVersion(r.stdout) : undefined;
}

/**
 * CRI-O's "restart": a restart (paced within the unit's start limit, as containerd's), or a
 * reload by SIGHUP from a version known to make reloaded handlers usable (crioApplyBy); then the check
 * that CRI-O answers `crio status config` and lists every handler of the set with the
 * runtime_path written. A reload is not a start: systemd's start limit does not count it.
 */
export class CrioRestart extends ContainerdRestart {
  constructor(options: InstallerOptions, host: HostContext, log: Logger, timer: Timer, lockFile: string | undefined,
    private readonly version: CrioVersion | undefined) {
    super(options, host, log, timer, lockFile);
  }

  /** How changes reach this node's CRI-O (`reload` or `restart`), with --restart systemd. */
  get applyBy(): 'reload' | 'restart' {
    return crioApplyBy(this.version);
  }

  /** A crio.service found failed is CRI-O's own reason (exit 7, as containerd's ContainerdUnitFailed). */
  protected override get unitFailedReason(): string {
    return 'CrioUnitFailed';
  }

  override async restartAndCheck(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    const unit = layout.unit ?? 'crio';
    let argv: string[];
    if (this.options.restart === 'command') {
      argv = ['sh', '-c', this.options.restartCommand!];
    } else if (this.applyBy === 'reload') {
      argv = ['systemctl', 'reload', unit];
    } else {
      await this.paceRestart(layout);
      argv = ['systemctl', 'restart', unit];
    }
    this.log.info(`${this.options.restart === 'command' ? 'running the restart command for' : `${this.applyBy === 'reload' ? 'reloading' : 'restarting'}`} CRI-O`,
      { command: argv.join(' '), crio: this.version?.text ?? 'unknown' });
    let r = await this.timer.time('restartCommand', () => hostCommand(this.host, argv));
    if (r.code !== 0 && this.options.restart === 'systemd' && argv[1] === 'reload') {
      // A reload reaches a running CRI-O only: one that is down (it died on the last reload,
      // or was stopped) is started again, paced as any restart. A unit systemd gave up on
      // (start-limit-hit) refuses the start too, and that is reported.
      this.log.warn(`${argv.join(' ')} failed (${r.stderr.trim().slice(0, 200)}): restarting ${unit}.service instead`);
      await this.paceRestart(layout);
      const restart = ['systemctl', 'restart', unit];
      const again = await this.timer.time('restartCommand', () => hostCommand(this.host, restart));
      if (again.code !== 0) {
        return `${unit}.service is down: ${argv.join(' ')} exited ${r.code} (${r.stderr.trim().slice(0, 200)}) and ${restart.join(' ')} exited ${again.code} (${again.stderr.trim().slice(0, 200)})`;
      }
      r = again;
    }
    if (r.code !== 0) return `${argv.join(' ')} exited ${r.code} (${unit}.service): ${r.stderr.trim().slice(0, 300)}`;
    // A SIGHUP is handled a moment later: the check is asked until it passes or time is up.
    const deadline = Date.now() + this.options.healthTimeoutSeconds * 1000;
    let last = 'no answer';
    while (Date.now() < deadline) {
      last = await this.timer.time('health', () => this.served(layout, installs)) ?? '';
      if (last === '') return undefined;
      await new Promise(res => setTimeout(res, 100));
    }
    return `CRI-O (${unit}.service) not serving the handlers after ${this.options.healthTimeoutSeconds}s: ${last}`;
  }

  override async verify(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    return this.served(layout, installs);
  }

  /** `crio status config` from the running CRI-O: undefined when it answers and lists each handler with its runtime_path. */
  private async served(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    const r = await hostCommand(this.host, ['crio', 'status', '--socket', layout.socket, 'config'], 10_000);
    if (r.code !== 0) return `CRI-O does not answer on ${layout.socket} (crio status config: ${r.stderr.trim().slice(0, 200)})`;
    for (const i of installs) {
      const served = crioServedHandler(r.stdout, i.handler);
      if (typeof served === 'string') return served;
      if (served.runtimePath !== i.binary) return `CRI-O serves handler ${i.handler} with runtime_path ${served.runtimePath}, not ${i.binary}`;
    }
    return undefined;
  }
}

/** What the install flow lends the CRI-O branch (Installer.crioContext). */
export interface CrioContext {
  readonly o: InstallerOptions;
  readonly log: Logger;
  readonly timer: Timer;
  readonly sets: ChangeSets;
  readonly changed: string[];
  readonly solo: boolean;
  readonly joinedAt: number | undefined;
  /** The handler's versioned files on the host. */
  readonly versions: HostVersions;
  /** The backups of the file this run edits (our drop-in). */
  readonly backups: ConfigBackups;
  readState(): InstallState | undefined;
  intact(state: InstallState, layout: DistroLayout): boolean;
  fetch(): Promise<Fetched>;
  /** From now on SIGTERM lets the change finish. */
  touched(): void;
  /** Whether the running CRI-O serves these handlers (CrioRestart.verify), without a reload. */
  verify(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined>;
  joinMembers(): Promise<void>;
  expandOptions(payloadDir: string | undefined): Record<string, string>;
  /** The clean-up after a completed change (unused payloads, old backups). */
  cleanUp(): void;
  stateFile(): string;
}

/** CRI-O's main config and every file of its drop-in folder (host path → text) but `ours`, in the order CRI-O reads them. */
export function crioConfigFiles(o: Pick<InstallerOptions, 'hostRoot'>, ours: string): Map<string, string> {
  const files = new Map<string, string>();
  const main = onHost(o, CRIO_MAIN_CONFIG);
  if (fs.existsSync(main)) files.set(CRIO_MAIN_CONFIG, fs.readFileSync(main, 'utf8'));
  const dir = onHost(o, CRIO_DROPIN_DIR);
  if (!fs.existsSync(dir)) return files;
  for (const name of fs.readdirSync(dir).sort()) {
    const hostPath = `${CRIO_DROPIN_DIR}/${name}`;
    if (hostPath === ours) continue;
    const full = path.join(dir, name);
    if (fs.statSync(full).isFile()) files.set(hostPath, fs.readFileSync(full, 'utf8'));
  }
  return files;
}

/**
 * What of a CRI-O record's drop-in is not as written, or not what CRI-O would serve (the
 * binary and payload are checked by the caller); undefined when it is: our file is there,
 * ours (its marker), parses, names the recorded runtime_path and runtime_type, and no file
 * CRI-O reads after it defines the handler again (the last one wins).
 */
export function crioDropInMissing(o: Pick<InstallerOptions, 'hostRoot'>, state: CrioInstallState): string | undefined {
  const file = onHost(o, state.configFile);
  if (!fs.existsSync(file)) return `its drop-in ${state.configFile} is missing`;
  const text = fs.readFileSync(file, 'utf8');
  if (!isOurDropIn(text, state.handler)) return `${state.configFile} is no longer the installer's drop-in`;
  const served = crioServedHandler(text, state.handler);
  if (typeof served === 'string') return `${state.configFile}: ${served}`;
  if (served.runtimePath !== state.crio.runtimePath || served.runtimeType !== state.crio.kind) {
    return `${state.configFile} does not name ${state.crio.runtimePath} (${state.crio.kind}) for it`;
  }
  const later = crioShadowing(crioConfigFiles(o, state.configFile), state.handler, state.configFile);
  if (later.length > 0) {
    return `${later.join(', ')} define${later.length > 1 ? '' : 's'} handler ${state.handler} too and CRI-O reads ${later.length > 1 ? 'them' : 'it'} after ${state.configFile} ` +
      '(the last one wins): CRI-O would not run the installed binary for it';
  }
  return undefined;
}

/** CRI-O is not the one the handler was installed (or last verified) with: its version lines before and now. */
export function crioReplaced(state: CrioInstallState, version: CrioVersion | undefined): { before: string; now: string } | undefined {
  const [before, now] = [state.crio.build, version?.build];
  return before !== undefined && now !== undefined && before !== now ? { before, now } : undefined;
}

/** The CRI-O branch of one install or uninstall, under the host lock. */
export class CrioChange {
  constructor(private readonly ctx: CrioContext, private readonly version: CrioVersion | undefined) {}

  async install(base: InstallResult, layout: DistroLayout, prefetched: Fetched | undefined, waiters: LockWaiters): Promise<InstallResult | Pending> {
    const { ctx } = this;
    const o = ctx.o;
    await ctx.sets.finishOpenFirst(layout, ctx.solo);
    const recorded = ctx.readState();
    const state = recorded?.runtime === 'crio' ? recorded : undefined;
    const unchanged = (s: CrioInstallState): InstallResult => ({
      ...base,
      outcome: 'unchanged',
      message: `handler ${o.handler} already installed from this artifact`,
      sha256: s.sha256,
      paths: { ...base.paths, binary: s.binary },
    });
    // In place, but CRI-O was replaced since: verified with the CRI-O there now first.
    const inPlace = (s: CrioInstallState) => (crioReplaced(s, this.version) ? this.verifyWithNewCrio(base, layout, s) : unchanged(s));
    if (state && o.sha256 === state.sha256 && ctx.intact(state, layout)) return inPlace(state);
    if (!this.version) {
      throw crioRefused(`crio was not found on the host or did not tell its version (crio --version, searched ${hostSearchPath('crio').join(':')}): nothing was changed`);
    }
    const fetched = prefetched ?? await ctx.fetch();
    if (state && fetched.sha256 === state.sha256 && ctx.intact(state, layout)) return inPlace(state);

    const { binary, payloadDir } = ctx.versions.paths(fetched.sha256, fetched.shim.name);
    // Everything CRI-O would refuse is refused here, before anything on the host changes.
    const dropInFile = onHost(o, layout.config);
    const original = fs.existsSync(dropInFile) ? fs.readFileSync(dropInFile, 'utf8') : undefined;
    if (original !== undefined && !isOurDropIn(original, o.handler)) {
      throw crioRefused(`${layout.config} exists and was not written by the installer (its first line is not "# rcm-node-installer: runtime handler ${o.handler}"): it is left as it is`);
    }
    let handler: CrioHandler;
    let text: string;
    try {
      handler = crioHandlerFor({
        handler: o.handler,
        binary,
        runtimeType: o.runtimeType,
        options: ctx.expandOptions(payloadDir),
        settings: o.handlerSettings,
        version: this.version,
      });
      text = crioDropIn(handler);
    } catch (e) {
      throw e instanceof ConfigError ? crioRefused(`${e.message}; nothing was changed`) : e;
    }
    const others = crioConflicts(crioConfigFiles(o, layout.config), o.handler, layout.config);
    if (others.length > 0) {
      throw crioRefused(`handler ${o.handler} is already defined by ${others.join(', ')}: the installer does not edit another tool's file nor shadow its handler; nothing was changed`);
    }
    for (const what of handler.ignored) ctx.log.warn(`CRI-O has no equivalent of the Shim's ${what}: it is left out of the handler`, { handler: o.handler });

    const previousBinary = state?.binary;
    const { exists, damaged } = ctx.versions.inspect(fetched, binary, payloadDir);
    const configChanges = original !== text;
    const folderCreated = !fs.existsSync(path.dirname(dropInFile));
    const newState: CrioInstallState = {
      runtime: 'crio',
      handler: o.handler,
      shimName: o.shimName,
      sha256: fetched.sha256,
      binarySha256: fetched.binarySha256,
      location: fetched.url,
      binary,
      runtimeOptions: o.runtimeOptions,
      ...(o.runtimeType ? { runtimeType: o.runtimeType } : {}),
      ...(Object.keys(o.handlerSettings).length > 0 ? { handlerSettings: o.handlerSettings } : {}),
      ...(payloadDir && fetched.payload ? { payloadShim: o.payloadShim, payloadDir, payloadDigest: fetched.payload.digest } : {}),
      distro: layout.distro,
      configFile: layout.config,
      configCreated: state?.configCreated ?? original === undefined,
      configFolderCreated: state?.configFolderCreated ?? folderCreated,
      installedAt: new Date().toISOString(),
      crio: { kind: handler.kind, runtimePath: handler.runtimePath, build: this.version.build },
    };
    const stateText = JSON.stringify(newState, null, 2) + '\n';
    const replacesVersion = previousBinary && previousBinary !== binary && !ctx.versions.isPayload(previousBinary);
    const oldVersion = replacesVersion ? path.posix.dirname(previousBinary) : undefined;
    const journal = configChanges ? {
      handler: o.handler,
      operation: 'install' as const,
      phase: 'prepared' as const,
      layout,
      original: original ?? null,
      edited: text,
      mode: 0o644,
      // What CRI-O must list for the handler after the reload (runtime_path).
      binary: handler.runtimePath,
      createdPaths: [...(exists ? [] : [payloadDir ?? path.posix.dirname(binary)]), ...(folderCreated ? [path.posix.dirname(layout.config)] : [])],
      removeWhenDone: oldVersion ? [oldVersion] : [],
      stateToWrite: { file: ctx.stateFile(), text: stateText },
      ...(original !== undefined ? { backup: ctx.backups.path() } : {}),
      ...ctx.sets.membership(),
      startedAt: new Date().toISOString(),
    } : undefined;
    ctx.touched();
    if (journal) {
      await ctx.joinMembers();
      ctx.sets.save(journal);
    }
    await ctx.versions.write(fetched, binary, payloadDir, exists, damaged);
    await pauseForTests('binary-written');
    const result: InstallResult = {
      ...base,
      outcome: 'installed',
      message: `handler ${o.handler} installed from ${fetched.url} (CRI-O, runtime_type ${handler.kind})`,
      sha256: fetched.sha256,
      paths: { ...base.paths, binary },
      state: newState,
    };
    const finish = async (): Promise<InstallResult> => {
      ctx.cleanUp();
      return result;
    };
    if (journal) {
      if (journal.backup) ctx.backups.save(original!, journal.backup);
      writeAtomically(dropInFile, text, 0o644);
      ctx.changed.push(`${original === undefined ? 'created' : 'rewrote'} ${layout.config}: handler ${o.handler} (${handler.kind})`);
      ctx.sets.save({ ...journal, phase: 'config-written' });
      await pauseForTests('config-written');
      if (oldVersion) ctx.changed.push(`removed previous version ${previousBinary}`);
      return ctx.sets.commit({ journal, result, finish }, waiters, ctx.solo, ctx.joinedAt);
    }
    // The same drop-in (a repaired binary, a lost record): nothing for CRI-O to read again.
    writeAtomically(onHost(o, ctx.stateFile()), stateText, 0o600);
    if (oldVersion) {
      removeAndPrune(ctx.o, onHost(o, oldVersion));
      ctx.changed.push(`removed previous version ${previousBinary}`);
    }
    return finish();
  }

  /** For status: CRI-O was replaced since the record (its version lines changed), said as drift; undefined when not. */
  replacedProblem(state: CrioInstallState): string | undefined {
    const replaced = crioReplaced(state, this.version);
    return replaced ? `CRI-O was replaced since (${replaced.before} → ${replaced.now}): the handler has to be verified with it again` : undefined;
  }

  /**
   * The handler's files and drop-in are in place, but CRI-O was replaced since (a package
   * upgrade, a new node image): the CRI-O there now must accept the handler's binary name
   * and serve the handler (`crio status config`) before the install counts. Nothing is
   * reloaded or restarted (whoever replaced CRI-O restarted it) and nothing is changed when
   * it does not: the reason says what to do.
   */
  private async verifyWithNewCrio(base: InstallResult, layout: DistroLayout, state: CrioInstallState): Promise<InstallResult> {
    const { ctx } = this;
    const replaced = crioReplaced(state, this.version)!;
    const refused = (why: string) => new InstallerError(ExitCode.CONFIG_FAILED, 'ReplacedCrioRefusesHandler',
      `CRI-O was replaced (${replaced.before} → ${replaced.now}) and does not take handler ${state.handler}: ${why}; nothing was changed ` +
      `(${state.configFile} stays: uninstall the Shim from this node, or give it a binary this CRI-O accepts)`);
    const nameProblem = state.crio.kind === 'vm' ? crioBinaryNameProblem(state.crio.runtimePath, this.version) : undefined;
    if (nameProblem) throw refused(nameProblem);
    const problem = await ctx.timer.time('health', () => ctx.verify(layout, [{ handler: state.handler, binary: state.crio.runtimePath }]));
    if (problem) throw refused(problem);
    const verified: CrioInstallState = { ...state, crio: { ...state.crio, build: replaced.now } };
    writeAtomically(onHost(ctx.o, ctx.stateFile()), JSON.stringify(verified, null, 2) + '\n', 0o600);
    ctx.changed.push(`verified handler ${state.handler} with CRI-O ${this.version!.text} (installed with ${replaced.before})`);
    return {
      ...base,
      outcome: 'installed',
      message: `handler ${state.handler} verified with the CRI-O that replaced the one it was installed with`,
      sha256: state.sha256,
      paths: { ...base.paths, binary: state.binary },
      state: verified,
    };
  }

  async uninstall(base: InstallResult, layout: DistroLayout, waiters: LockWaiters): Promise<InstallResult | Pending> {
    const { ctx } = this;
    const o = ctx.o;
    await ctx.sets.finishOpenFirst(layout, ctx.solo);
    const recorded = ctx.readState();
    const state = recorded?.runtime === 'crio' ? recorded : undefined;
    const configFile = state?.configFile ?? layout.config;
    const file = onHost(o, configFile);
    const original = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined;
    const notInstalled: InstallResult = { ...base, outcome: 'not-installed', message: `handler ${o.handler} is not installed here` };
    if (original === undefined && !state) return notInstalled;
    const result: InstallResult = { ...base, outcome: 'uninstalled', message: `handler ${o.handler} uninstalled` };
    if (original !== undefined) {
      // Our file only: one that another tool wrote under our name is left alone, and reported.
      if (!isOurDropIn(original, o.handler)) {
        throw crioRefused(`${configFile} was not written by the installer (its first line is not our marker): it is left as it is; remove it by hand if it is stale`);
      }
      ctx.touched();
      const journal = {
        handler: o.handler,
        operation: 'uninstall' as const,
        phase: 'prepared' as const,
        layout: { ...layout, config: configFile },
        original,
        edited: null,
        mode: 0o644,
        createdPaths: [],
        removeWhenDone: [shimsDir(ctx.o), ctx.stateFile()],
        backup: ctx.backups.path(),
        ...ctx.sets.membership(),
        startedAt: new Date().toISOString(),
      };
      await ctx.joinMembers();
      ctx.sets.save(journal);
      ctx.backups.save(original, journal.backup);
      fs.rmSync(file, { force: true });
      const folder = path.dirname(file);
      if (state?.configFolderCreated && fs.readdirSync(folder).length === 0) fs.rmdirSync(folder);
      ctx.changed.push(`removed ${configFile} (handler ${o.handler})`);
      ctx.sets.save({ ...journal, phase: 'config-written' });
      await pauseForTests('config-written');
      if (state) ctx.changed.push(`removed ${state.payloadDir ?? shimsDir(ctx.o)}`);
      return ctx.sets.commit({
        journal,
        result,
        finish: async () => {
          ctx.cleanUp();
          return result;
        },
      }, waiters, ctx.solo, ctx.joinedAt);
    }
    // The record without its drop-in: only our files are left to remove.
    removeAndPrune(ctx.o, onHost(o, shimsDir(ctx.o)));
    removeAndPrune(ctx.o, onHost(o, ctx.stateFile()));
    ctx.changed.push(`removed ${state!.payloadDir ?? shimsDir(ctx.o)}`);
    ctx.cleanUp();
    return result;
  }
}
