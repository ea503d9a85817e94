// Before anything is written or restarted, the host's containerd reads the candidate config
// (`config dump`, imports merged) and must serve the handler with our binary: a config it
// refuses, a disabled CRI plugin (Docker's packaged config) or a handler that an imported
// file defines too is refused here (exit 4, host untouched) instead of after a restart.
// k3s/rke2 templates are rendered by k3s itself at start: for them the check after the
// restart remains.
import * as fs from 'fs';
import * as path from 'path';
import { beginMarker, CONFIG_VERSIONS, ConfigError, effectiveConfigProblem, handlerBinary } from './containerd-config';
import { DistroLayout, HostContext, hostCommand, onHost } from './host';
import { InstallerOptions } from './options';
import { Logger } from '../shared/log';

export interface PreflightContext {
  readonly options: InstallerOptions;
  readonly host: HostContext;
  readonly log: Logger;
  /** containerd answered on the host: without it there is nothing to ask. */
  readonly containerdFound: boolean;
}

/** Throws a ConfigError naming what the host's containerd says against `candidate` for `layout`. */
export async function preflight(ctx: PreflightContext, layout: DistroLayout, candidate: string, binary: string): Promise<void> {
  if (!ctx.containerdFound) {
    ctx.log.warn('no containerd on the host to check the new config with; it is checked after the restart');
    return;
  }
  if (layout.template) return;
  if (layout.effectiveConfig !== layout.config) {
    // A drop-in beside a main config: nothing containerd reads today may define the handler,
    // but our own drop-in (an earlier revision, which this one replaces), and then only with
    // the binary that drop-in gives it (else another file wins over ours).
    const today = await dumpProblem(ctx, layout.effectiveConfig, ownDropInBinary(ctx.options, layout));
    if (today) throw new ConfigError(today);
  }
  const candidateFile = candidatePath(ctx.options, layout);
  const onDisk = onHost(ctx.options, candidateFile);
  const createdFolder = fs.mkdirSync(path.dirname(onDisk), { recursive: true });
  // A file written by `config dump` imports itself: the candidate stands in for the config there too.
  const selfImport = new RegExp(`(["'])${escapeRegExp(layout.config)}\\1`, 'g');
  fs.writeFileSync(onDisk, candidate.replace(selfImport, `$1${candidateFile}$1`), { mode: 0o600 });
  try {
    const problem = await dumpProblem(ctx, candidateFile, binary);
    if (problem) throw new ConfigError(problem);
  } finally {
    fs.rmSync(onDisk, { force: true });
    if (createdFolder) fs.rmSync(createdFolder, { recursive: true, force: true });
  }
}

/** The shim our drop-in at `layout.config` gives the handler today (an earlier revision's), or undefined. */
function ownDropInBinary(options: InstallerOptions, layout: DistroLayout): string | undefined {
  const file = onHost(options, layout.config);
  if (!fs.existsSync(file)) return undefined;
  const text = fs.readFileSync(file, 'utf8');
  if (!text.includes(beginMarker(options.handler))) return undefined;
  for (const version of CONFIG_VERSIONS) {
    const binary = handlerBinary(text, version, options.handler);
    if (binary !== undefined) return binary;
  }
  return undefined;
}

/**
 * Where the candidate is written for containerd to read (a host path): beside the config,
 * so that relative imports resolve as they will, except for files of our own (drop-ins in
 * a folder a distribution watches), which import nothing and go under the install root.
 */
function candidatePath(options: InstallerOptions, layout: DistroLayout): string {
  const name = `.${path.posix.basename(layout.config)}.rcm-candidate-${process.pid}`;
  const beside = path.posix.dirname(layout.config);
  return !layout.ownFile && fs.existsSync(onHost(options, beside)) ? `${beside}/${name}` : `${options.installRoot}/preflight/${name}`;
}

/** What the host's containerd says against a config file (a host path), or undefined. */
async function dumpProblem(ctx: PreflightContext, configFile: string, runtimeType: string | undefined): Promise<string | undefined> {
  const dump = await hostCommand(ctx.host, ['containerd', '--config', configFile, 'config', 'dump'], 30_000);
  if (dump.code !== 0) return `containerd refuses the new config: ${dump.stderr.trim().split('\n').slice(-3).join(' ').slice(0, 500)}`;
  return effectiveConfigProblem(dump.stdout, ctx.options.handler, runtimeType);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
