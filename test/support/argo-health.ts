import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ArgoCd } from '../../src';

/** What Argo CD's health check returned. */
export interface Health { status: string; message: string }

/** A JSON value as a Lua 5.1 table constructor (null and undefined fields are left out, as Argo CD does). */
export function toLua(value: unknown): string {
  if (value === null || value === undefined) return 'nil';
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : 'nil';
  if (typeof value === 'string') {
    // byte by byte: printable ASCII as is, everything else as a \ddd escape
    return '"' + [...Buffer.from(value, 'utf8')].map(b => (b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c ? String.fromCharCode(b) : `\\${b}`)).join('') + '"';
  }
  if (Array.isArray(value)) return `{${value.map(toLua).join(', ')}}`;
  const fields = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== null && v !== undefined);
  return `{${fields.map(([k, v]) => `[${toLua(k)}] = ${toLua(v)}`).join(', ')}}`;
}

/**
 * Runs the Shim health check with the real Lua 5.1 interpreter (Debian's `lua5.1`) the way
 * Argo CD runs a custom health check: `obj` set globally to the live object, the script run
 * as a chunk, its returned table read.
 */
export function argoHealth(obj: unknown): Health {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-argo-health-'));
  try {
    const script = path.join(dir, 'health.lua');
    fs.writeFileSync(script, ArgoCd.shimHealthCheck);
    const runner = path.join(dir, 'run.lua');
    fs.writeFileSync(runner, [
      `obj = ${toLua(obj)}`,
      'local check = assert(loadfile(arg[1]))',
      'local hs = check()',
      'assert(type(hs) == "table", "the health check returned no table")',
      'io.write(tostring(hs.status), "\\n", tostring(hs.message))',
    ].join('\n'));
    const out = execFileSync('lua5.1', [runner, script], { encoding: 'utf8' });
    const [status, ...message] = out.split('\n');
    return { status, message: message.join('\n') };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
