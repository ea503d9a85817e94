import { execFileSync, ExecFileSyncOptions } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { parseAllDocuments } from 'yaml';

// A new user's cdk8s app, as `cdk8s init typescript-app` makes it, with this library's packed
// tarball installed: what the docs' code blocks, the release dry run and the new user's
// end-to-end path compile and synthesize against.
//
// `cdk8s init` itself cannot run here: its post-init hook runs `cdk8s import` (the Kubernetes
// schema from GitHub). So the app is written by hand from the cdk8s-cli template that init
// scaffolds (node_modules/cdk8s-cli/templates/typescript-app), with the versions init would put
// in it (those of the cdk8s, cdk8s-plus-33 and cdk8s-cli packages that cdk8s-cli resolves, as
// its determineDeps() does), then `npm install` from the registry. What init's hook adds and
// this app lacks: imports/k8s.ts (the generated Kubernetes classes) and the first synth.

const ROOT = path.join(__dirname, '..', '..');
const CLI = path.dirname(require.resolve('cdk8s-cli/package.json', { paths: [ROOT] }));
const TEMPLATE = path.join(CLI, 'templates', 'typescript-app');

/** The template files init copies (the hook and its help text are not part of the app). */
const TEMPLATE_FILES = ['cdk8s.yaml', 'jest.config.js', 'main.test.ts', 'main.ts', 'package.json', 'tsconfig.json', '{{}}.gitignore'];

/** The library's name as users install it. */
export const PACKAGE_NAME: string = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).name;

function run(cmd: string, args: string[], options: ExecFileSyncOptions & { cwd: string }): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024, ...options }) as string;
  } catch (e: any) {
    throw new Error(`${cmd} ${args.join(' ')} (in ${options.cwd}) failed: ${e.status ?? e.signal}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
  }
}

/**
 * Packs the library as `npm pack` would publish it (package.json's `files`), from the
 * compiled lib/ and .jsii (`npx projen compile` first). Returns the tarball's path in `dir`.
 */
export function packTarball(dir: string): string {
  for (const f of ['lib/src/index.js', 'lib/src/index.d.ts', '.jsii']) {
    if (!fs.existsSync(path.join(ROOT, f))) throw new Error(`${f} is missing: run \`npx projen compile\` first`);
  }
  fs.mkdirSync(dir, { recursive: true });
  const out = run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT });
  const [{ filename }] = JSON.parse(out);
  return path.join(dir, filename);
}

/** The versions `cdk8s init` fills into the template (cdk8s-cli's own determineDeps()). */
function templateVersions(): Record<string, string> {
  const version = (name: string) => JSON.parse(fs.readFileSync(require.resolve(`${name}/package.json`, { paths: [CLI] }), 'utf8')).version;
  const cli = JSON.parse(fs.readFileSync(path.join(CLI, 'package.json'), 'utf8'));
  return {
    cdk8s_core_version: version('cdk8s'),
    cdk8s_plus_version: version('cdk8s-plus-33'),
    constructs_version: cli.dependencies.constructs.replace('^', ''),
    cdk8s_cli_spec: `^${cli.version}`,
  };
}

/** Fills sscaff's `{{ name }}` placeholders as init does. */
function fill(text: string, values: Record<string, string>): string {
  return text.replace(/\{\{\s*([$\w]+)\s*\}\}/g, (whole, key) => {
    if (!(key in values)) throw new Error(`the cdk8s-cli template has a placeholder this harness does not know: ${whole}`);
    return values[key];
  });
}

export interface FreshApp {
  /** The app's folder. */
  readonly dir: string;
  /** The library tarball installed into it. */
  readonly tarball: string;
  /** The cdk8s-plus package the template scaffolds (cdk8s-plus-33 today). */
  readonly cdk8sPlus: string;
  /** Replaces main.ts (what a user pastes into it). */
  writeMain(source: string): void;
  /** `tsc` over main.ts with the app's tsconfig.json; returns the compiler's output ('' when it compiles). */
  compile(file?: string): { ok: boolean; output: string };
  /** `npx cdk8s synth` (the template's `npm run synth`); returns the synthesized objects. */
  synth(): any[];
}

/**
 * Creates the app in `dir` (which must not exist or be empty) from the template, with the
 * library from `tarball` added as `npm install <tarball>` adds it, and installs it all.
 */
export function createFreshApp(dir: string, tarball: string): FreshApp {
  fs.mkdirSync(dir, { recursive: true });
  if (fs.readdirSync(dir).length > 0) throw new Error(`${dir} is not empty`);
  const values = { $base: path.basename(dir), ...templateVersions() };
  for (const file of TEMPLATE_FILES) {
    const text = fs.readFileSync(path.join(TEMPLATE, file), 'utf8');
    fs.writeFileSync(path.join(dir, file.replace('{{}}', '')), fill(text, values));
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const cdk8sPlus = Object.keys(pkg.dependencies).find(d => d.startsWith('cdk8s-plus-'));
  if (!cdk8sPlus) throw new Error('the cdk8s-cli template no longer depends on a cdk8s-plus package');
  // What `npm install <tarball>` writes: the dependency by its file path.
  pkg.dependencies[PACKAGE_NAME] = `file:${path.relative(dir, tarball)}`;
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg, null, 2) + '\n');
  run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, timeout: 600_000 });
  return freshApp(dir, tarball, cdk8sPlus);
}

function freshApp(dir: string, tarball: string, cdk8sPlus: string): FreshApp {
  const env = { ...process.env, NODE_NO_WARNINGS: '1' };
  return {
    dir,
    tarball,
    cdk8sPlus,
    writeMain: source => fs.writeFileSync(path.join(dir, 'main.ts'), source),
    compile: (file = 'main.ts') => {
      // The app's own compiler options; only the file under test (the template's main.test.ts
      // tests the template's main.ts, which the file under test replaces).
      const config = path.join(dir, `tsconfig.check-${path.basename(file, '.ts')}.json`);
      fs.writeFileSync(config, JSON.stringify({ extends: './tsconfig.json', compilerOptions: { noEmit: true }, include: [file] }));
      try {
        execFileSync(path.join(dir, 'node_modules', '.bin', 'tsc'), ['-p', config], { cwd: dir, encoding: 'utf8', stdio: 'pipe', env });
        return { ok: true, output: '' };
      } catch (e: any) {
        return { ok: false, output: `${e.stdout ?? ''}${e.stderr ?? ''}`.trim() || String(e) };
      } finally {
        fs.rmSync(config, { force: true });
      }
    },
    synth: () => {
      fs.rmSync(path.join(dir, 'dist'), { recursive: true, force: true });
      run('npx', ['cdk8s', 'synth', '--check-upgrade=false'], { cwd: dir, env, timeout: 300_000 });
      return synthesizedObjects(path.join(dir, 'dist'));
    },
  };
}

/** Every object in the YAML files of a cdk8s output folder. */
export function synthesizedObjects(outdir: string): any[] {
  const files = fs.readdirSync(outdir).filter(f => f.endsWith('.yaml')).sort();
  if (files.length === 0) throw new Error(`no YAML in ${outdir}`);
  return files.flatMap(f => parseAllDocuments(fs.readFileSync(path.join(outdir, f), 'utf8')).map(d => d.toJS())).filter(o => o);
}

/** A fenced code block of a Markdown file. */
export interface CodeBlock {
  readonly file: string;
  readonly line: number;
  readonly lang: string;
  /** The line right before the fence is `<!-- fragment -->`. */
  readonly fragment: boolean;
  readonly text: string;
}

/** The fenced code blocks of a Markdown file (``` or ~~~, possibly indented in a list). */
export function codeBlocks(file: string, markdown: string): CodeBlock[] {
  const lines = markdown.split('\n');
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w+-]*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    let end = i + 1;
    while (end < lines.length && !new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`).test(lines[end])) end++;
    blocks.push({
      file,
      line: i + 1,
      lang: lang.toLowerCase(),
      fragment: i > 0 && lines[i - 1].trim() === '<!-- fragment -->',
      text: lines.slice(i + 1, end).map(l => (l.startsWith(indent) ? l.slice(indent.length) : l)).join('\n'),
    });
    i = end;
  }
  return blocks;
}
