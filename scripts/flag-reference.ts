// Generates docs/operators/flags.md, the reference of every flag of the three programs, from
// their flag tables (the `FLAGS` arrays the programs parse their command lines with). The
// tables are read from the sources as written, without running the programs (their modules
// start the program when loaded): string literals as they are, and the few computed values
// (a default from the environment, the package version) as named below. A value this script
// cannot render stops it, so that a new kind of value is described on purpose.
//
//   npx ts-node --transpile-only scripts/flag-reference.ts          # writes the page
//   npx jest test/docs/flag-reference.test.ts                       # fails when the page is stale
import * as fs from 'fs';
import * as path from 'path';
// typescript is a devDependency: this script runs in a checkout, never in the package.
// eslint-disable-next-line import/no-extraneous-dependencies
import * as ts from 'typescript';
import { envName } from '../src/shared/flags';

/** The page, relative to the repository root. */
export const REFERENCE_PATH = 'docs/operators/flags.md';

const ROOT = path.join(__dirname, '..');

interface Program {
  /** The program's name, as its usage line says. */
  readonly name: string;
  /** The source file that holds its `FLAGS` table and the `parseFlags` call. */
  readonly source: string;
  /** Who runs it, for the page. */
  readonly runs: string;
}

const PROGRAMS: Program[] = [
  {
    name: 'rcm-controller',
    source: 'src/runtime/flags.ts',
    runs: 'The controller Deployment. `RuntimeClassManager` renders these flags from its props; set them through the props, not by hand.',
  },
  {
    name: 'rcm-node-installer',
    source: 'src/installer/options.ts',
    runs: 'Every installer Job (install mode Jobs): the controller sets the per-Shim values as `RCM_*` variables of the Job\'s pod; `installerEnv` adds the node-level ones (`RCM_CONFIG`, `RCM_SOCKET`, `RCM_INSTALL_ROOT`, `RCM_DISTRO`, ...). It also runs on a host directly.',
  },
  {
    name: 'rcm-node-agent',
    source: 'src/agent/main.ts',
    runs: 'The node agent DaemonSet (install mode NodeAgent). Installer flags given after `--` apply to every installer run of the agent (which sets the host root, `/host` in its pod, and JSON logs itself); `installerEnv` reaches its installer runs as `RCM_*` variables.',
  },
];

/** Values that are computed when the program starts, as the page names them. */
const COMPUTED: { [expression: string]: string } = {
  'VERSION': '<version>',
  'os.hostname()': '<host name>',
  "crypto.randomBytes(4).toString('hex')": '<8 random hex digits>',
};

interface FlagRow {
  readonly name: string;
  readonly arg?: string;
  readonly repeat: boolean;
  readonly help: string;
  readonly default?: string;
}

interface ProgramFlags {
  readonly usage: string;
  readonly readsEnvironment: boolean;
  readonly flags: FlagRow[];
}

/** Reads a program's flag table, usage line and whether it reads RCM_* variables, from its source. */
export function readProgram(source: string): ProgramFlags {
  const file = ts.createSourceFile(source, fs.readFileSync(path.join(ROOT, source), 'utf8'), ts.ScriptTarget.ES2022, true);
  const constants = new Map<string, ts.Expression>();
  let table: ts.ArrayLiteralExpression | undefined;
  let usage: string | undefined;
  let readsEnvironment: boolean | undefined;
  const visit = (node: ts.Node): void => {
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer) {
      constants.set(node.name.text, node.initializer);
      if (node.name.text === 'FLAGS' && ts.isArrayLiteralExpression(node.initializer)) table = node.initializer;
    }
    if (ts.isStringLiteralLike(node) && node.text.startsWith('Usage: ') && usage === undefined) usage = node.text.slice('Usage: '.length);
    // parseFlags(FLAGS, argv, env): an empty object literal as env means no RCM_* variables.
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'parseFlags') {
      const env = node.arguments[2];
      readsEnvironment = !(env && ts.isObjectLiteralExpression(env) && env.properties.length === 0);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  if (!table) throw new Error(`${source}: no FLAGS array`);
  if (!usage) throw new Error(`${source}: no 'Usage: ...' line`);
  if (readsEnvironment === undefined) throw new Error(`${source}: no parseFlags(...) call`);

  const render = (e: ts.Expression): string => {
    const text = e.getText(file);
    if (COMPUTED[text] !== undefined) return COMPUTED[text];
    if (ts.isStringLiteralLike(e)) return e.text;
    if (ts.isParenthesizedExpression(e)) return render(e.expression);
    if (e.kind === ts.SyntaxKind.TrueKeyword) return 'true';
    if (e.kind === ts.SyntaxKind.FalseKeyword) return 'false';
    if (ts.isTemplateExpression(e)) {
      return e.head.text + e.templateSpans.map(s => render(s.expression) + s.literal.text).join('');
    }
    // process.env.NAME: the variable, as the page writes it.
    if (ts.isPropertyAccessExpression(e) && e.expression.getText(file) === 'process.env') return `$${e.name.text}`;
    if (ts.isBinaryExpression(e) && e.operatorToken.kind === ts.SyntaxKind.QuestionQuestionToken) {
      return `${render(e.left)} (else ${render(e.right)})`;
    }
    // A constant of the same file: an array of strings joined, or a string.
    if (ts.isCallExpression(e) && ts.isPropertyAccessExpression(e.expression) && e.expression.name.text === 'join'
      && ts.isIdentifier(e.expression.expression) && e.arguments.length === 1) {
      const array = constants.get(e.expression.expression.text);
      if (array && ts.isArrayLiteralExpression(array)) return array.elements.map(x => render(x)).join(render(e.arguments[0]));
    }
    if (ts.isIdentifier(e) && constants.has(e.text)) return render(constants.get(e.text)!);
    throw new Error(`${source}: cannot render \`${text}\` in the flag table; add it to COMPUTED in scripts/flag-reference.ts`);
  };

  const flags = table.elements.map(element => {
    if (!ts.isObjectLiteralExpression(element)) throw new Error(`${source}: a FLAGS entry is not an object literal`);
    const fields: { [key: string]: string } = {};
    for (const p of element.properties) {
      if (!ts.isPropertyAssignment(p)) throw new Error(`${source}: a FLAGS entry has a property that is not a plain assignment`);
      fields[p.name.getText(file)] = render(p.initializer);
    }
    if (!fields.name || fields.help === undefined) throw new Error(`${source}: a FLAGS entry lacks name or help`);
    return { name: fields.name, arg: fields.arg, repeat: fields.repeat === 'true', help: fields.help, default: fields.default };
  });
  return { usage, readsEnvironment, flags };
}

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function code(text: string): string {
  return text.includes('`') ? `\`\` ${text} \`\`` : `\`${text}\``;
}

/** The whole page. */
export function flagReference(): string {
  const lines = [
    '<!-- Generated by scripts/flag-reference.ts from the programs\' flag tables: do not edit.',
    '     Regenerate with: npx ts-node --transpile-only scripts/flag-reference.ts -->',
    '# Flags of the controller, the node installer and the node agent',
    '',
    'Every flag of the three programs, from the tables they parse their command lines with',
    '(`--help` prints the same). A flag is given as `--name value` or `--name=value`; a flag',
    'without a value is a switch. Where the program reads its environment, every flag can also',
    'be given as the variable in the second column (a flag on the command line wins; a repeatable',
    'flag takes one value per line there). Values shown as `<...>` are computed when the program',
    'starts.',
    '',
  ];
  for (const program of PROGRAMS) {
    const { usage, readsEnvironment, flags } = readProgram(program.source);
    lines.push(`## ${program.name}`, '', '```text', usage, '```', '', program.runs, '');
    if (!readsEnvironment) lines.push('This program reads its flags from the command line only, not from `RCM_*` variables.', '');
    lines.push('| Flag | Environment variable | Description |', '|---|---|---|');
    for (const f of flags) {
      const flag = code(`--${f.name}${f.arg ? ` ${f.arg}` : ''}`);
      const env = readsEnvironment && f.name !== 'help' ? code(envName(f.name)) : '-';
      const notes = [f.repeat && !/repeatable/i.test(f.help) ? 'Repeatable.' : '', f.default !== undefined ? `Default: ${code(f.default)}.` : ''].filter(Boolean).join(' ');
      lines.push(`| ${cell(flag)} | ${cell(env)} | ${cell(notes ? `${f.help}. ${notes}` : f.help)} |`);
    }
    lines.push('');
  }
  lines.push(`Source tables: ${PROGRAMS.map(p => `[\`${p.source}\`](../../${p.source})`).join(', ')}.`, '');
  return lines.join('\n');
}

if (require.main === module) {
  fs.writeFileSync(path.join(ROOT, REFERENCE_PATH), flagReference());
  process.stdout.write(`wrote ${REFERENCE_PATH}\n`);
}
