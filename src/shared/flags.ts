// Command-line flags shared by rcm-node-installer and rcm-controller: `--name value` or
// `--name=value`, each flag also read from RCM_<NAME_IN_UPPER_SNAKE_CASE>; flags win.

export interface FlagSpec {
  readonly name: string;
  /** What the value is called in the help; a flag without one is a switch (value 'true'). */
  readonly arg?: string;
  /** May be given more than once; in the environment, one value per line. */
  readonly repeat?: boolean;
  readonly help: string;
}

export interface ParsedFlags {
  readonly single: Record<string, string>;
  readonly repeated: Record<string, string[]>;
  readonly positional: string[];
}

/** A flag the caller must reject; each program turns it into its own kind of error. */
export class FlagError extends Error {}

/** The environment variable that gives a flag (RCM_<FLAG IN UPPER SNAKE CASE>). */
export function envName(flag: string): string {
  return `RCM_${flag.toUpperCase().replace(/-/g, '_')}`;
}

/** Parses `argv` over the RCM_* variables of `env`; 'help' when --help is given. */
export function parseFlags(specs: FlagSpec[], argv: string[], env: NodeJS.ProcessEnv): ParsedFlags | 'help' {
  const single: Record<string, string> = {};
  const repeated: Record<string, string[]> = {};
  const positional: string[] = [];
  for (const f of specs) {
    const e = env[envName(f.name)];
    if (e === undefined || e === '') continue;
    // Repeated values come one per line (URLs and option values may hold commas).
    if (f.repeat) repeated[f.name] = e.split('\n').map(s => s.trim()).filter(Boolean);
    else single[f.name] = e;
  }
  // A repeated flag on the command line replaces the environment's list rather than adding to it.
  const fromFlags: Record<string, string[]> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq > 0 ? eq : undefined);
    const spec = specs.find(f => f.name === name);
    if (!spec) throw new FlagError(`unknown flag --${name} (see --help)`);
    if (name === 'help') return 'help';
    let value = 'true';
    if (spec.arg) {
      if (eq > 0) value = arg.slice(eq + 1);
      else if (i + 1 < argv.length) value = argv[++i];
      else throw new FlagError(`--${name} needs a value (${spec.arg})`);
    }
    (fromFlags[name] ??= []).push(value);
  }
  for (const [name, values] of Object.entries(fromFlags)) {
    if (specs.find(f => f.name === name)!.repeat) repeated[name] = values;
    else single[name] = values[values.length - 1];
  }
  return { single, repeated, positional };
}

/** A whole number of at least `min`, or `fallback` when the flag is not given. */
export function wholeNumber(value: string | undefined, flag: string, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (!/^[0-9]+$/.test(value) || Number(value) < min) throw new FlagError(`--${flag}: "${value}" is not a whole number >= ${min}`);
  return Number(value);
}

/** KEY=VALUE entries of a repeated flag. */
export function keyValues(values: string[], flag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const v of values) {
    const i = v.indexOf('=');
    if (i <= 0) throw new FlagError(`--${flag}: "${v}" is not KEY=VALUE`);
    out[v.slice(0, i)] = v.slice(i + 1);
  }
  return out;
}
