import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ShimDefinition } from '../../src';

const ROOT = path.join(__dirname, '..', '..');

test('imports/ is generated from the CRD file (run `npx projen import` after editing the CRD)', () => {
  // GIVEN the repository's CRD
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-import-'));
  // WHEN the typed classes are generated again
  execFileSync(path.join(ROOT, 'node_modules', '.bin', 'cdk8s'),
    ['import', ShimDefinition.file, '--language', 'typescript', '--output', out], { cwd: ROOT, stdio: 'pipe' });
  // THEN they equal the committed ones
  const generated = fs.readFileSync(path.join(out, 'runtime.spinkube.dev.ts'), 'utf8');
  expect(generated).toEqual(fs.readFileSync(path.join(ROOT, 'imports', 'runtime.spinkube.dev.ts'), 'utf8'));
  fs.rmSync(out, { recursive: true, force: true });
}, 120_000);
