// Change sets: the changes of the installers running on one node at once, written one after
// the other (each on the text the previous one left) and restarted for once.
//
// Each change is journalled (journal.ts) before it touches the config, with its set, its
// place in it and the run that made it. A run whose change is written leaves the restart to
// the last installer that is still coming (commit); that one restarts containerd once,
// checks that it serves every handler of the set, and completes each change, or rolls the
// whole set back and has each change tried again alone. Every installer of the set reads its
// outcome (outcomes.ts) when it holds the host lock again. A set whose installers all ended
// (a SIGKILL, a reboot) is an interrupted one: the next run finishes or undoes it as a whole.
import * as fs from 'fs';
import * as path from 'path';
import { ContainerdRestart } from './containerd-restart';
import { ExitCode, InstallerError } from './errors';
import { DistroLayout, onHost, removeAndPrune, writeAtomically } from './host';
import { LockWaiters } from './host-lock';
import type { InstallResult } from './install';
import { chainStarts, inOrder, Journal, parseJournal, settlementOf } from './journal';
import { InstallerOptions } from './options';
import { Outcome, OutcomeBox } from './outcomes';
import { pauseForTests } from './test-hooks';
import { Timer } from './timer';
import { Logger } from '../shared/log';

/**
 * A change written to the host and waiting for its set's restart: the host lock is released
 * meanwhile, so that the installers waiting for it add their changes to the same restart.
 */
export interface Pending {
  readonly journal: Journal;
  /** The run's result once containerd came back with the set. */
  readonly result: InstallResult;
  /** What the run does then (its clean-up), returning its result. */
  readonly finish: () => Promise<InstallResult>;
}

export function isPending(step: InstallResult | Pending): step is Pending {
  return 'journal' in step && 'finish' in step;
}

/** The node's runtime, as messages name it (a CRI-O node's changes go through the same sets). */
function runtimeOf(layout: Pick<DistroLayout, 'distro'>): string {
  return layout.distro === 'crio' ? 'CRI-O (crio.service)' : 'containerd';
}

export class ChangeSets {
  /**
   * @param id this run (its changes' owner, its outcome's name)
   * @param members the runs with a change written (a marker each, held while they live)
   */
  constructor(private readonly o: InstallerOptions, private readonly log: Logger, private readonly timer: Timer,
    private readonly restart: ContainerdRestart, private readonly id: string, private readonly lockFile: string,
    private readonly members: LockWaiters) {}

  /** The journal of a handler's change (a host path). */
  journalFile(handler: string): string {
    return path.join(this.o.installRoot, 'journal', `${handler}.json`);
  }

  /** Writes (and fsyncs) the journal: it must be on disk before what it announces happens. */
  save(journal: Journal): void {
    writeAtomically(onHost(this.o, this.journalFile(journal.handler)), JSON.stringify(journal) + '\n', 0o600);
  }

  clear(handler: string): void {
    removeAndPrune(this.o, onHost(this.o, this.journalFile(handler)));
  }

  /** The handlers whose change an interrupted installer left unfinished. */
  handlers(): string[] {
    const dir = onHost(this.o, path.join(this.o.installRoot, 'journal'));
    return fs.existsSync(dir) ? fs.readdirSync(dir).filter(f => f.endsWith('.json')).map(f => f.slice(0, -'.json'.length)).sort() : [];
  }

  /** The journals of changes written and not yet complete (of any handler: they share the config), in the order written. */
  pending(): Journal[] {
    const journals: Journal[] = [];
    for (const handler of this.handlers()) {
      const journal = parseJournal(fs.readFileSync(onHost(this.o, this.journalFile(handler)), 'utf8'));
      if (journal) {
        journals.push(journal);
      } else {
        this.log.warn('an unreadable journal of an interrupted installer is dropped; the config is left as it is', { handler });
        this.clear(handler);
      }
    }
    return inOrder(journals);
  }

  /** The config file's bytes now (null: no file), for a journal's host path. */
  private readonly currentConfig = (configFile: string): string | null => {
    const file = onHost(this.o, configFile);
    return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
  };

  /**
   * The open change set: changes written by installers that wait for its restart (each in its
   * file, none restarted yet). Empty when there is none, or when what the journals show is an
   * interrupted set (recoverInterrupted settles that first).
   */
  open(): Journal[] {
    const journals = this.pending();
    const open = journals.length > 0 && journals.every(j => j.phase === 'config-written')
      && settlementOf(journals, this.currentConfig).action === 'finish';
    return open ? journals : [];
  }

  /** This run's place in the open set (a new set when there is none). */
  membership(): Pick<Journal, 'set' | 'seq' | 'owner'> {
    const open = this.open();
    const last = open[open.length - 1];
    return { set: last?.set ?? this.id, seq: last ? (last.seq ?? 0) + 1 : 0, owner: this.id };
  }

  /**
   * An open set is restarted for before this run's change joins one, when the change must be
   * alone (it is retried alone after a refused set) or when the set holds a change of this
   * handler (another installer of it: one journal per handler).
   */
  async finishOpenFirst(layout: DistroLayout, solo: boolean): Promise<void> {
    const open = this.open();
    if (open.length === 0 || !(solo || open.some(j => j.handler === this.o.handler) || !this.restart.restarts(layout))) return;
    await this.finish(open);
    if (this.pending().length > 0) {
      throw new InstallerError(ExitCode.RESTART_FAILED_NOT_ROLLED_BACK, 'RestartFailedNotRolledBack',
        `the changes other installers wrote were undone after ${runtimeOf(layout)} refused them, but ${runtimeOf(layout)} is still failing: the node needs a human`);
    }
  }

  /**
   * This run's change is written: containerd restarts for it now, with every change of the
   * open set, unless another installer waits for the lock with a change of its own. Then the
   * restart is left to the last of them, and this run waits for the lock again (Pending).
   */
  async commit(pending: Pending, waiters: LockWaiters, solo: boolean, joinedAt: number | undefined): Promise<InstallResult | Pending> {
    const waited = joinedAt === undefined ? Number.POSITIVE_INFINITY : Date.now() - joinedAt;
    if (this.restart.restarts(pending.journal.layout) && !solo) {
      // The installers of one wave do not start together: the controller creates a node's Jobs
      // of several Shims one reconcile apart, and their pods start a moment apart. The first
      // change written waits a little (--set-gather) even when nobody is seen coming yet, then
      // as long as someone is (at most --set-wait).
      if (waited < this.o.setGatherSeconds * 1000) return pending;
      if (waited < this.o.setWaitSeconds * 1000 && await waiters.others(this.id) > 0) return pending;
    }
    await this.finish(this.open());
    const outcome = this.outcomes().peek(this.id);
    if (outcome?.kind === 'done') {
      this.outcomes().take(this.id);
      return pending.finish();
    }
    if (outcome?.kind === 'failed') {
      this.outcomes().take(this.id);
      throw new InstallerError(outcome.exitCode, outcome.reason, outcome.message);
    }
    // Rolled back with the others: tried again alone, under the lock again (resume).
    return pending;
  }

  /**
   * Restarts containerd once for a set of written changes and checks it serves every one of
   * them; then completes each (its state, its clean-up). A set containerd refuses goes back to
   * the config before it, containerd restarts again, and each change is tried again alone by
   * its installer. Each installer of the set gets its outcome.
   */
  async finish(set: readonly Journal[]): Promise<void> {
    if (set.length === 0) return;
    const layout = set[0].layout;
    const installs = set.filter(j => j.operation === 'install' && j.binary !== undefined).map(j => ({ handler: j.handler, binary: j.binary! }));
    const runtime = runtimeOf(layout);
    if (set.length > 1) this.log.info(`${runtime} restarts once for ${set.length} changes`, { handlers: set.map(j => `${j.operation} ${j.handler}`) });
    const problem = this.restart.restarts(layout) ? await this.timer.time('restart', () => this.restart.restartAndCheck(layout, installs)) : undefined;
    if (!problem) {
      for (const j of set) {
        await this.complete(j);
        this.tell(j, { kind: 'done' });
      }
      return;
    }
    this.log.error(`${runtime} did not come back with the new config; rolling back`, { problem, changes: set.length });
    for (const j of set) this.save({ ...j, phase: 'rolling-back' });
    this.undo(set, chainStarts(set));
    const again = await this.timer.time('restart', () => this.restart.restartAndCheck(layout, []));
    if (again) {
      // The journals stay: the next run restarts again.
      const message = `${runtime} failed after the change (${problem}) and is still failing after restoring the previous config (${again}): the node needs a human`;
      for (const j of set) this.tell(j, { kind: 'failed', exitCode: ExitCode.RESTART_FAILED_NOT_ROLLED_BACK, reason: 'RestartFailedNotRolledBack', message });
      return;
    }
    for (const j of set) {
      this.clear(j.handler);
      this.tell(j, set.length > 1 ? { kind: 'retry-alone' } : {
        kind: 'failed',
        exitCode: ExitCode.RESTART_FAILED_ROLLED_BACK,
        reason: 'RestartFailedRolledBack',
        message: `${runtime} failed after the change (${problem}); the previous config and binary were restored and ${runtime} is serving again`,
      });
    }
  }

  /** A change containerd came back with: the state it announced, the clean-up it left, and its journal gone. */
  private async complete(j: Journal): Promise<void> {
    this.save({ ...j, phase: 'restarted' });
    if (j.stateToWrite) writeAtomically(onHost(this.o, j.stateToWrite.file), j.stateToWrite.text, 0o600);
    await pauseForTests('state-written');
    for (const p of j.removeWhenDone) removeAndPrune(this.o, onHost(this.o, p));
    this.clear(j.handler);
  }

  /** Takes a set's changes out: each file back to its bytes before the set, what the changes created removed. */
  private undo(set: readonly Journal[], rewrite: ReadonlyMap<string, string | null>): void {
    for (const [configFile, text] of rewrite) {
      const file = onHost(this.o, configFile);
      const mode = set.find(j => j.layout.config === configFile)?.mode ?? 0o644;
      if (text === null) fs.rmSync(file, { force: true });
      else writeAtomically(file, text, mode);
    }
    for (const j of set) {
      for (const p of j.createdPaths) removeAndPrune(this.o, onHost(this.o, p));
      if (j.backup) removeAndPrune(this.o, onHost(this.o, j.backup));
    }
  }

  /** Whether an installer of these changes still lives (it waits for the lock to restart or to read its outcome). */
  private async anyOwnerAlive(journals: readonly Journal[]): Promise<boolean> {
    for (const j of journals) {
      if (j.owner !== undefined && j.owner !== this.id && await this.members?.alive(j.owner)) return true;
    }
    return false;
  }

  /** Leaves an installer of the set its outcome (read when it holds the lock again). */
  private tell(j: Journal, outcome: Outcome): void {
    if (j.owner !== undefined) this.outcomes().put(j.owner, outcome);
  }

  outcomes(): OutcomeBox {
    return new OutcomeBox(`${this.lockFile}.outcomes`);
  }

  /**
   * Finishes or undoes what interrupted installers (of any handler: they share the config)
   * left half done, before this run changes anything. Runs under the host lock. An open set
   * (its installers wait for its restart) is not interrupted: it is joined or finished.
   */
  async recoverInterrupted(changed: string[]): Promise<void> {
    const journals = this.pending();
    if (journals.length === 0) return;
    if (this.open().length > 0 && await this.anyOwnerAlive(journals)) return;
    const settlement = settlementOf(journals, this.currentConfig);
    const handlers = journals.map(j => j.handler).join(', ');
    for (const j of journals) {
      this.log.warn(`an installer was interrupted during the ${j.operation} of ${j.handler}: ${settlement.action}`, { phase: j.phase, since: j.startedAt });
      changed.push(`recovered the interrupted ${j.operation} of ${j.handler}: ${settlement.action}`);
    }
    switch (settlement.action) {
      case 'complete':
        for (const j of journals) {
          await this.complete(j);
          this.tell(j, { kind: 'done' });
        }
        return;
      case 'finish':
        await this.finish(journals);
        break;
      case 'undo':
        this.undo(journals, settlement.rewrite);
        if (settlement.restart && this.restart.restarts(journals[0].layout)) {
          const again = await this.timer.time('restart', () => this.restart.restartAndCheck(journals[0].layout, []));
          if (again) break; // the journals stay: the next run restarts again
        }
        for (const j of journals) {
          this.clear(j.handler);
          this.tell(j, { kind: 'retry' });
        }
        return;
      case 'abandon':
        this.log.warn(`${settlement.file} was changed by someone else since: the interrupted change is left as it is`);
        for (const j of journals) this.clear(j.handler);
        return;
    }
    if (this.pending().length > 0) {
      throw new InstallerError(ExitCode.RESTART_FAILED_NOT_ROLLED_BACK, 'RestartFailedNotRolledBack',
        `an interrupted change of ${handlers} was undone, but ${runtimeOf(journals[0].layout)} is still failing: the node needs a human`);
    }
  }
}
