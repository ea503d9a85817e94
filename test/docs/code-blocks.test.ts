import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import Ajv from 'ajv';
import { App, Chart } from 'cdk8s';
import { parseAllDocuments } from 'yaml';
import { RuntimeClassManager } from '../../src';
import { CodeBlock as Block, codeBlocks, createFreshApp, FreshApp, packTarball } from '../support/fresh-app';

// Every code block of README.md, docs/**/*.md and CONTRIBUTING.md is checked:
//  - ```ts: a complete main.ts of a fresh `cdk8s init typescript-app` app, with the packed
//    tarball of this library installed in it (test/support/fresh-app.ts): it compiles with the
//    app's tsconfig and synthesizes. A block whose fence is preceded by the line
//    `<!-- fragment -->` is a fragment and is not checked.
//  - ```yaml: every document parses; a document of kind Shim validates against the OpenAPI
//    schema of the CRD the constructs synthesize, with unknown fields refused (the API server
//    would silently prune them).
//  - ```sh / ```bash / ```shell / ```console: each command's program exists on PATH, is a shell
//    builtin or keyword, or is one of the tools the docs expect a user to have (USER_TOOLS).

const ROOT = path.join(__dirname, '..', '..');

/** Tools a user of the docs has that CI's machine need not have on PATH (kubectl is cached by provisioning, not installed). */
const USER_TOOLS = ['kubectl', 'cdk8s', 'npm', 'npx', 'node', 'git', 'helm', 'docker'];
const SHELL_BUILTINS = ['cd', 'export', 'echo', 'set', 'unset', 'test', '[', '[[', 'read', 'source', '.', 'exit', 'true', 'false',
  'printf', 'wait', 'local', 'eval', 'exec', 'trap', 'shift', 'return', 'pushd', 'popd', 'command', 'type', 'alias', 'sleep'];
/** Words that start a command list rather than name a program. */
const SHELL_KEYWORDS = ['if', 'then', 'else', 'elif', 'fi', 'do', 'done', 'while', 'until', '!', '{', '}', '(', ')', 'time', 'esac'];

function markdownFiles(): string[] {
  const docs = path.join(ROOT, 'docs');
  const inDocs = fs.existsSync(docs)
    ? fs.readdirSync(docs, { recursive: true }).map(String).filter(f => f.endsWith('.md')).map(f => path.join('docs', f))
    : [];
  return ['README.md', 'CONTRIBUTING.md', ...inDocs.sort()].filter(f => fs.existsSync(path.join(ROOT, f)));
}

const blocks = markdownFiles().flatMap(f => codeBlocks(f, fs.readFileSync(path.join(ROOT, f), 'utf8')));
const name = (b: Block) => `${b.file}:${b.line}`;
const tsBlocks = blocks.filter(b => ['ts', 'typescript'].includes(b.lang) && !b.fragment);
const yamlBlocks = blocks.filter(b => ['yaml', 'yml'].includes(b.lang));
const shellBlocks = blocks.filter(b => ['sh', 'bash', 'shell', 'console'].includes(b.lang));

// --- shell: the programs a block's commands run ---

/** Removes quoted strings (keeping $(...) found inside double quotes) and comments. */
function unquote(line: string): { text: string; substitutions: string[] } {
  let text = '';
  const substitutions: string[] = [];
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '\'') {
      const end = line.indexOf('\'', i + 1);
      text += '\'\'';
      i = end < 0 ? line.length : end;
    } else if (c === '$' && line[i + 1] === '(' && line[i + 2] !== '(') {
      let depth = 1;
      let j = i + 2;
      for (; j < line.length && depth > 0; j++) {
        if (line[j] === '(') depth++;
        if (line[j] === ')') depth--;
      }
      substitutions.push(line.slice(i + 2, j - 1));
      text += 'SUBST';
      i = j - 1;
    } else if (c === '"') {
      let j = i + 1;
      for (; j < line.length && line[j] !== '"'; j++) {
        if (line[j] === '\\') {
          j++;
        } else if (line[j] === '$' && line[j + 1] === '(') {
          const inner = unquote(line.slice(j));
          substitutions.push(...inner.substitutions);
          const close = line.indexOf(')', j);
          j = close < 0 ? line.length : close;
        }
      }
      text += '""';
      i = j;
    } else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) {
      break;
    } else {
      text += c;
    }
  }
  return { text, substitutions };
}

/** The programs run by a shell block (console blocks: only the `$ ` lines). */
export function programs(block: { lang: string; text: string }): string[] {
  let lines = block.text.split('\n');
  if (block.lang === 'console') lines = lines.filter(l => l.startsWith('$ ')).map(l => l.slice(2));
  // Continuation lines join; here-documents are data.
  const joined: string[] = [];
  let heredoc: string | undefined;
  for (const line of lines) {
    if (heredoc !== undefined) {
      if (line.trim() === heredoc) heredoc = undefined;
      continue;
    }
    const h = /<<-?\s*['"]?(\w+)['"]?/.exec(line);
    if (h) heredoc = h[1];
    if (joined.length > 0 && joined[joined.length - 1].endsWith('\\')) joined[joined.length - 1] = joined[joined.length - 1].slice(0, -1) + ' ' + line;
    else joined.push(line);
  }
  const found: string[] = [];
  const visit = (line: string) => {
    const { text, substitutions } = unquote(line);
    substitutions.forEach(visit);
    for (const segment of text.split(/&&|\|\||[;|&]|\bthen\b|\bdo\b|\belse\b/)) {
      const words = segment.trim().split(/\s+/).filter(Boolean);
      while (words.length > 0 && (SHELL_KEYWORDS.includes(words[0]) || /^\w+=/.test(words[0]))) words.shift();
      const [first] = words;
      if (!first || ['for', 'case', 'in'].includes(first) || /^[<>]|^\d*>/.test(first) || first === 'SUBST') continue;
      if (first.endsWith(')') && !first.startsWith('(')) continue; // a case pattern
      found.push(first.replace(/^\(+/, ''));
    }
  };
  joined.forEach(visit);
  return found;
}

function onPath(program: string): boolean {
  if (program.includes('/')) return fs.existsSync(program);
  return (process.env.PATH ?? '').split(':').some(dir => {
    try {
      fs.accessSync(path.join(dir, program), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function missingPrograms(block: { lang: string; text: string }): string[] {
  return programs(block).filter(p => !USER_TOOLS.includes(p) && !SHELL_BUILTINS.includes(p) && !onPath(p));
}

// --- yaml: the Shim's schema, from the CRD the constructs synthesize ---

function synthesizedCrd(): any {
  const app = new App();
  new RuntimeClassManager(new Chart(app, 'docs'), 'Manager');
  const crd = app.synthYaml().split(/^---$/m).map(d => parseAllDocuments(d)[0]?.toJS())
    .find(o => o?.kind === 'CustomResourceDefinition' && o.spec?.names?.kind === 'Shim');
  if (!crd) throw new Error('the constructs synthesize no CRD of kind Shim');
  return crd;
}

/** The OpenAPI v3 schema of a CRD version as JSON Schema for Ajv, refusing unknown fields as a strict client would. */
function jsonSchema(node: any): any {
  if (Array.isArray(node)) return node.map(jsonSchema);
  if (node === null || typeof node !== 'object') return node;
  const out: any = {};
  for (const [k, v] of Object.entries(node)) {
    if (k.startsWith('x-kubernetes-') || k === 'nullable') continue;
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, jsonSchema(s)])) : jsonSchema(v);
  }
  if (node['x-kubernetes-int-or-string']) {
    delete out.type;
    out.anyOf = [...(out.anyOf ?? []), { type: 'integer' }, { type: 'string' }];
  }
  if (node.nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  if (node.properties && node.additionalProperties === undefined && !node['x-kubernetes-preserve-unknown-fields']) out.additionalProperties = false;
  return out;
}

function shimValidator(): (doc: any) => string[] {
  const crd = synthesizedCrd();
  const ajv = new Ajv({ strict: false, allErrors: true });
  for (const format of ['int32', 'int64', 'date-time', 'byte', 'double', 'float']) ajv.addFormat(format, true);
  const validators = new Map<string, ReturnType<Ajv['compile']>>(crd.spec.versions.map((v: any) =>
    [`${crd.spec.group}/${v.name}`, ajv.compile(jsonSchema(v.schema.openAPIV3Schema))]));
  return doc => {
    const validate = validators.get(doc.apiVersion);
    if (!validate) return [`apiVersion ${doc.apiVersion} is not served by the CRD (${[...validators.keys()].join(', ')})`];
    if (validate(doc)) return [];
    return (validate.errors ?? []).map(e => `${e.instancePath || '/'} ${e.message}${e.params ? ' ' + JSON.stringify(e.params) : ''}`);
  };
}

// --- the checks ---

const validateShim = shimValidator();

function yamlProblems(text: string): string[] {
  const problems: string[] = [];
  for (const doc of parseAllDocuments(text)) {
    for (const e of doc.errors) problems.push(`does not parse: ${e.message}`);
    if (doc.errors.length > 0) continue;
    const value = doc.toJS();
    if (value?.kind === 'Shim') problems.push(...validateShim(value).map(p => `Shim ${value.metadata?.name}: ${p}`));
  }
  return problems;
}

describe('the checks themselves', () => {
  test('find every fenced block and the fragment marker', () => {
    const md = ['text', '<!-- fragment -->', '```ts', 'a();', '```', '', '- item', '  ```sh', '  ls -l', '  ```', '~~~yaml', 'a: 1', '~~~'].join('\n');
    expect(codeBlocks('x.md', md)).toEqual([
      { file: 'x.md', line: 3, lang: 'ts', fragment: true, text: 'a();' },
      { file: 'x.md', line: 8, lang: 'sh', fragment: false, text: 'ls -l' },
      { file: 'x.md', line: 11, lang: 'yaml', fragment: false, text: 'a: 1' },
    ]);
  });

  test('shell: the programs of pipes, lists, substitutions, continuations and conditionals, not of data', () => {
    const text = [
      'kubectl get shims | grep spin && echo "found $(date -u)" # a comment; rm -rf',
      'FOO=1 npx cdk8s synth \\',
      '  --app "node main.js"',
      'for n in $(kubectl get nodes -o name); do kubectl label "$n" a=b; done',
      'if ! curl -fsS http://x; then exit 1; fi',
      'cat <<EOF >file',
      'nonexistent-program arg',
      'EOF',
    ].join('\n');
    expect(programs({ lang: 'sh', text }).sort()).toEqual(
      ['cat', 'curl', 'date', 'echo', 'exit', 'grep', 'kubectl', 'kubectl', 'kubectl', 'npx'].sort());
    expect(missingPrograms({ lang: 'sh', text: 'kubectl apply -f dist/ && rcm-no-such-tool --x' })).toEqual(['rcm-no-such-tool']);
    expect(programs({ lang: 'console', text: '$ kubectl get shims\nNAME   READY\nspin   True' })).toEqual(['kubectl']);
  });

  test('yaml: a bad document and a Shim the CRD refuses are reported', () => {
    expect(yamlProblems('a: [1, 2')).not.toEqual([]);
    const shim = (spec: object) => `apiVersion: runtime.spinkube.dev/v1alpha1\nkind: Shim\nmetadata: {name: s}\nspec: ${JSON.stringify(spec)}`;
    const good = { runtimeClass: { name: 's', handler: 's' }, fetchStrategy: { anonHttp: { location: 'https://example.com/s.tar.gz', sha256: 'a'.repeat(64) } } };
    expect(yamlProblems(shim(good))).toEqual([]);
    expect(yamlProblems(shim({ ...good, fetchStrategy: { anonHttp: { location: 'https://example.com/s.tar.gz', sha256: '<64 hex>' } } }))).not.toEqual([]);
    expect(yamlProblems(shim({ ...good, nodeSelecter: { a: 'b' } })).join()).toMatch(/additional/);
  });
});

describe('docs code blocks', () => {
  test('there are blocks to check (README.md and docs/)', () => {
    expect(markdownFiles()).toContain('README.md');
    expect(tsBlocks.length + yamlBlocks.length + shellBlocks.length).toBeGreaterThan(0);
  });

  if (yamlBlocks.length > 0) {
    test.each(yamlBlocks.map(b => [name(b), b] as const))('yaml %s parses and its Shims validate against the CRD', (_n, b) => {
      expect(yamlProblems(b.text)).toEqual([]);
    });
  }

  if (shellBlocks.length > 0) {
    test.each(shellBlocks.map(b => [name(b), b] as const))('%s: every command\'s program exists', (_n, b) => {
      expect(missingPrograms(b)).toEqual([]);
    });
  }

  describe('TypeScript blocks compile and synthesize as main.ts of a fresh cdk8s app', () => {
    let work: string;
    let app: FreshApp;
    let compiled: Map<string, string>;
    const file = (i: number) => `docs-block-${i}.ts`;
    // A control: a block that must not compile (it names a prop the constructs do not have).
    const control = 'import { App, Chart } from \'cdk8s\';\nimport { RuntimeClassManager } from \'runtime-class-manager-cdk8s\';\n'
      + 'const app = new App();\nnew RuntimeClassManager(new Chart(app, \'c\'), \'M\', { noSuchProp: true });\napp.synth();\n';

    beforeAll(() => {
      work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-docs-'));
      app = createFreshApp(path.join(work, 'app'), packTarball(path.join(work, 'pack')));
      // All blocks in one compiler run (each is its own module, at the app's root like main.ts).
      const sources = [...tsBlocks.map(b => b.text), control];
      sources.forEach((s, i) => fs.writeFileSync(path.join(app.dir, file(i)), s));
      const config = path.join(app.dir, 'tsconfig.docs.json');
      fs.writeFileSync(config, JSON.stringify({ extends: './tsconfig.json', compilerOptions: { noEmit: true }, include: sources.map((_s, i) => file(i)) }));
      let output = '';
      try {
        execFileSync(path.join(app.dir, 'node_modules', '.bin', 'tsc'), ['-p', config, '--pretty', 'false'], { cwd: app.dir, encoding: 'utf8', stdio: 'pipe' });
      } catch (e: any) {
        output = `${e.stdout ?? ''}${e.stderr ?? ''}`;
      }
      compiled = new Map(sources.map((_s, i) => [file(i), output.split('\n').filter(l => l.startsWith(file(i))).join('\n')]));
    }, 600_000);

    afterAll(() => {
      if (work) fs.rmSync(work, { recursive: true, force: true });
    });

    test('the control block fails to compile (the check can fail)', () => {
      expect(compiled.get(file(tsBlocks.length))).toMatch(/noSuchProp/);
    });

    if (tsBlocks.length > 0) {
      test.each(tsBlocks.map((b, i) => [name(b), i] as const))('ts %s', (_n, i) => {
        expect(compiled.get(file(i))).toBe('');
        // What `cdk8s synth` runs (the template's `npx ts-node main.ts`), types already checked above.
        const outdir = path.join(work, `out-${i}`);
        try {
          execFileSync(path.join(app.dir, 'node_modules', '.bin', 'ts-node'), ['--transpile-only', file(i)],
            { cwd: app.dir, encoding: 'utf8', stdio: 'pipe', env: { ...process.env, CDK8S_OUTDIR: outdir } });
        } catch (e: any) {
          throw new Error(`the block does not synthesize:\n${e.stderr ?? e}`);
        }
        expect(fs.readdirSync(outdir).filter(f => f.endsWith('.yaml')).length).toBeGreaterThan(0);
      });
    }
  });
});
