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
