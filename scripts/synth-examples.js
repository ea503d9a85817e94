#!/usr/bin/env node
// Synthesizes every app in examples/ (a folder with main.ts) into dist/<folder>/.
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const root = path.join(__dirname, '..');
const examples = fs.readdirSync(path.join(root, 'examples'), { withFileTypes: true })
  .filter(entry => entry.isDirectory() && fs.existsSync(path.join(root, 'examples', entry.name, 'main.ts')))
  .map(entry => entry.name)
  .sort();

if (examples.length === 0) {
  console.error('no examples found under examples/');
  process.exit(1);
}
for (const name of examples) {
  const outdir = path.join(root, 'dist', name);
  fs.rmSync(outdir, { recursive: true, force: true });
  execFileSync(process.execPath, [require.resolve('ts-node/dist/bin.js'), '--transpile-only',
    '--project', path.join(root, 'tsconfig.json'), path.join(root, 'examples', name, 'main.ts')],
  { cwd: root, stdio: 'inherit', env: { ...process.env, CDK8S_OUTDIR: outdir } });
  const files = fs.readdirSync(outdir).filter(f => f.endsWith('.yaml'));
  console.log(`examples/${name} -> ${path.relative(root, outdir)}/ (${files.join(', ')})`);
}
