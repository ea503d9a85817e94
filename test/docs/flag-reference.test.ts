import * as fs from 'fs';
import * as path from 'path';
import { flagReference, readProgram, REFERENCE_PATH } from '../../scripts/flag-reference';

// docs/operators/flags.md is generated from the programs' flag tables: a flag added, removed or
// reworded in a program without regenerating the page fails here.
describe('the flag reference', () => {
  test('docs/operators/flags.md is what scripts/flag-reference.ts generates from the flag tables', () => {
    const committed = fs.readFileSync(path.join(__dirname, '..', '..', REFERENCE_PATH), 'utf8');
    const generated = flagReference();
    if (committed !== generated) {
      throw new Error(`${REFERENCE_PATH} is stale: run \`npx ts-node --transpile-only scripts/flag-reference.ts\` and commit the page\n`
        + `first differing line: ${firstDifference(committed, generated)}`);
    }
  });

  test('every flag of each table is on the page, with its environment variable where the program reads one', () => {
    const page = flagReference();
    for (const source of ['src/runtime/flags.ts', 'src/installer/options.ts', 'src/agent/main.ts']) {
      const program = readProgram(source);
      expect(program.flags.length).toBeGreaterThan(4);
      for (const flag of program.flags) {
        expect(page).toContain(`| \`--${flag.name}`);
        if (program.readsEnvironment && flag.name !== 'help') expect(page).toContain(`RCM_${flag.name.toUpperCase().replace(/-/g, '_')}`);
      }
    }
    // The node agent parses its own flags without the environment.
    expect(readProgram('src/agent/main.ts').readsEnvironment).toBe(false);
    expect(readProgram('src/runtime/flags.ts').readsEnvironment).toBe(true);
  });
});

function firstDifference(a: string, b: string): string {
  const x = a.split('\n');
  const y = b.split('\n');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] !== y[i]) return `line ${i + 1}: committed ${JSON.stringify(x[i])}, generated ${JSON.stringify(y[i])}`;
  }
  return 'none';
}
