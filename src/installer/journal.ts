// The record of a change in progress (<install root>/journal/<handler>.json), written and
// fsynced before the config is touched and removed once the change is complete.
//
// An installer can die anywhere: SIGKILL from the kubelet, an OOM kill, a node reboot in the
// middle of a containerd restart. Its next run (of any handler: they share the config file)
// reads the journal and either finishes the change (the config holds the new text:
// restart, check, then do what was left) or undoes it (the previous bytes back, the new
// binary removed, containerd restarted), so the node never stays half changed.
import type { DistroLayout } from './host';

export type JournalPhase = 'prepared' | 'config-written' | 'restarted' | 'rolling-back';

export interface Journal {
  readonly handler: string;
  readonly operation: 'install' | 'uninstall';
  phase: JournalPhase;
  /** Where containerd is and how it restarts. */
  readonly layout: DistroLayout;
  /** The config file's bytes before the change; null: there was no file. */
  readonly original: string | null;
  /** The config file's bytes after the change; null: the file is removed. */
  readonly edited: string | null;
  readonly mode: number;
  /** The binary the new config names (install), for the health check. */
  readonly binary?: string;
  /** Host paths to remove when the change is undone (what the change created). */
  readonly createdPaths: string[];
  /** Host paths to remove once the change is complete (the previous version, our files on uninstall). */
  readonly removeWhenDone: string[];
  /** The state file to write once the change is complete (install). */
  readonly stateToWrite?: { readonly file: string; readonly text: string };
  /** The backup of the config this change made (a host path), removed when the change is undone. */
  readonly backup?: string;
  /**
   * The change set this change belongs to: changes of several installers written one after
   * the other, each on the text the previous one left, and restarted for once. Absent: a set
   * of its own (what installers before change sets wrote).
   */
  readonly set?: string;
  /** Its place in the set (the order the changes were written in). */
  readonly seq?: number;
  /** The installer run that made the change (it waits for its outcome). */
  readonly owner?: string;
  readonly startedAt: string;
}

/** What the next run does with a journal, given the config file's bytes now (null: no file). */
export type Recovery = 'complete' | 'finish' | 'undo-restart' | 'undo' | 'abandon';

/**
 * The change left by an interrupted run: `complete` when containerd already came back with
 * the new bytes (only the state and the clean-up are left); `finish` when the config holds
 * the new bytes (restart, check, then complete);
 * `undo-restart` when it holds the old ones but containerd may have read the new ones (the
 * config had been written); `undo` when the config was never touched (only files of ours
 * to remove); `abandon` when someone else changed the file since (touch nothing).
 */
export function recoveryFor(journal: Journal, current: string | null): Recovery {
  if (current === journal.edited) return journal.phase === 'restarted' ? 'complete' : 'finish';
  if (current === journal.original) return journal.phase === 'prepared' ? 'undo' : 'undo-restart';
  return 'abandon';
}

export function parseJournal(text: string): Journal | undefined {
  try {
    const value = JSON.parse(text);
    const ok = value && typeof value === 'object' && typeof value.handler === 'string' && ['install', 'uninstall'].includes(value.operation)
      && ['prepared', 'config-written', 'restarted', 'rolling-back'].includes(value.phase) && value.layout && typeof value.layout.config === 'string'
      && (value.original === null || typeof value.original === 'string') && (value.edited === null || typeof value.edited === 'string')
      && Array.isArray(value.createdPaths) && Array.isArray(value.removeWhenDone);
    return ok ? value : undefined;
  } catch {
    return undefined;
  }
}

/** What is done with a change set (the journals of one set) given its config files' bytes now. */
export type Settlement =
  /** Every change is in its file and containerd came back with them: only the states and the clean-up are left. */
  | { readonly action: 'complete' }
  /** Every change is in its file: restart, check all of them, then complete. */
  | { readonly action: 'finish' }
  /**
   * Not every change made it into its file (an installer ended between two steps) or the set is
   * being rolled back: every file goes back to its text before the set (`rewrite`), what the
   * changes created goes, and containerd restarts when it may have read a change.
   */
  | { readonly action: 'undo'; readonly rewrite: ReadonlyMap<string, string | null>; readonly restart: boolean }
  /** A file holds bytes no change of the set wrote (someone else edited it since): touch nothing. */
  | { readonly action: 'abandon'; readonly file: string };

/** The journals of one set in the order they were written. */
export function inOrder(journals: readonly Journal[]): Journal[] {
  return [...journals].sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0) || a.startedAt.localeCompare(b.startedAt));
}

/**
 * The settlement of a change set. The changes to one file form a chain (each edited the text
 * the previous one left), so the file's bytes now show how far the chain got: at its end,
 * every change is in; equal to a change's original, that change and the later ones are out.
 * A set is finished or undone as a whole: containerd either restarts with all of its changes
 * or with none. For a set of one change this is `recoveryFor`.
 */
export function settlementOf(journals: readonly Journal[], current: (configFile: string) => string | null): Settlement {
  const chains = new Map<string, Journal[]>();
  for (const j of inOrder(journals)) chains.set(j.layout.config, [...(chains.get(j.layout.config) ?? []), j]);
  let allIn = true;
  const rewrite = new Map<string, string | null>();
  for (const [file, chain] of chains) {
    const now = current(file);
    if (now === chain[chain.length - 1].edited) {
      rewrite.set(file, chain[0].original);
      continue;
    }
    allIn = false;
    const known = chain.some(j => j.original === now || j.edited === now);
    if (!known) return { action: 'abandon', file };
    if (now !== chain[0].original) rewrite.set(file, chain[0].original);
  }
  if (allIn) return journals.every(j => j.phase === 'restarted') ? { action: 'complete' } : { action: 'finish' };
  return { action: 'undo', rewrite, restart: journals.some(j => j.phase !== 'prepared') };
}

/** Each file of a set with its bytes before the set's first change to it. */
export function chainStarts(set: readonly Journal[]): Map<string, string | null> {
  const starts = new Map<string, string | null>();
  for (const j of inOrder(set)) if (!starts.has(j.layout.config)) starts.set(j.layout.config, j.original);
  return starts;
}
