import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { startContainerd } from '../test/support/containerd-daemon';
import { createFreshApp } from '../test/support/fresh-app';
import { CONTROLLER_IMAGE, INSTALLER_IMAGE } from '../test/support/product-images';

// The release dry run's checks of what it built (scripts/release-dry-run.sh): each artifact
// carries the bumped version, the npm tarball installs into a fresh cdk8s app that
// synthesizes, the wheel is a wheel of that version, and the images run their programs.
//
// Usage: ts-node scripts/release-dry-run-check.ts VERSION NPM_TGZ WHEEL IMAGES_DIR   (root: a containerd runs the images)

const [version, tarball, wheel, imagesDir] = process.argv.slice(2);
const failures: string[] = [];
const log = (line: string) => process.stderr.write(`[release-dry-run] ${line}\n`);

function check(what: string, ok: boolean, detail: string): void {
  log(`${ok ? 'ok' : 'FAILED'}: ${what}${ok ? '' : `\n${detail}`}`);
  if (!ok) failures.push(what);
}

async function main(): Promise<void> {
  if (!version || !tarball || !wheel || !imagesDir) throw new Error('usage: release-dry-run-check.ts VERSION NPM_TGZ WHEEL IMAGES_DIR');
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-release-'));
  try {
    // The npm tarball: its package.json and jsii assembly carry the version.
    const packed = JSON.parse(execFileSync('tar', ['-xzOf', tarball, 'package/package.json'], { encoding: 'utf8' }));
    const assembly = JSON.parse(execFileSync('tar', ['-xzOf', tarball, 'package/.jsii'], { encoding: 'utf8' }));
    check(`the npm tarball is version ${version}`, packed.version === version && assembly.version === version,
      `package.json: ${packed.version}, .jsii: ${assembly.version}`);

    // ... and installs into a fresh cdk8s app that synthesizes, naming the images of this version.
    const app = createFreshApp(path.join(work, 'app'), path.resolve(tarball));
    app.writeMain([
      'import { App, Chart } from \'cdk8s\';',
      'import { RuntimeClassManager } from \'runtime-class-manager-cdk8s\';',
      '',
      'const app = new App();',
      'const manager = new RuntimeClassManager(new Chart(app, \'release\'), \'Manager\');',
      `manager.addShim('check', { handler: 'check', location: 'https://example.com/containerd-shim-check-v2.tar.gz', sha256: '${'0'.repeat(64)}' });`,
      'app.synth();',
      '',
    ].join('\n'));
    const compiled = app.compile();
    check('a fresh cdk8s app compiles against the npm tarball', compiled.ok, compiled.output);
    const objects = app.synth();
    const kinds = objects.map(o => o.kind);
    const deployment = objects.find(o => o.kind === 'Deployment');
    const image: string = deployment?.spec.template.spec.containers[0].image ?? '';
    check('the app synthesizes the CRD, the controller and the Shim', ['CustomResourceDefinition', 'Deployment', 'Shim'].every(k => kinds.includes(k)),
      `kinds: ${kinds.join(', ')}`);
    check(`the controller image defaults to tag ${version}`, image.endsWith(`/rcm-controller:${version}`), `image: ${image}`);

    // The wheel: named for the version, its metadata and the jsii assembly it embeds too.
    const names = execFileSync('python3', ['-c', 'import sys, zipfile; print("\\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))', wheel], { encoding: 'utf8' }).split('\n');
    const metadata = names.find(n => n.endsWith('.dist-info/METADATA'));
    const meta = metadata ? execFileSync('python3', ['-c', 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())', wheel, metadata], { encoding: 'utf8' }) : '';
    check(`the wheel is version ${version}`, path.basename(wheel).includes(`-${version}-`) && new RegExp(`^Version: ${version.replace(/\./g, '\\.')}$`, 'm').test(meta)
      && names.some(n => n.endsWith(`@${version}.jsii.tgz`)), `wheel: ${path.basename(wheel)}\n${meta.split('\n').slice(0, 4).join('\n')}\n${names.filter(n => n.endsWith('.tgz')).join('\n')}`);

    // The images run their programs: the installer's help names the version, and the controller's
    // default installer image is the one of this version.
    const containerd = await startContainerd();
    try {
      for (const tar of ['rcm-controller.tar', 'rcm-node-installer.tar']) containerd.ctr(['-n', 'rcm', 'images', 'import', path.join(imagesDir, tar)]);
      const installerHelp = containerd.ctr(['-n', 'rcm', 'run', '--rm', INSTALLER_IMAGE, 'release-installer']);
      check(`the installer image runs --help and prints version ${version}`, installerHelp.split('\n')[0] === `rcm-node-installer ${version}`
        && installerHelp.includes('Usage: rcm-node-installer'), installerHelp.split('\n').slice(0, 3).join('\n'));
      const controllerHelp = containerd.ctr(['-n', 'rcm', 'run', '--rm', CONTROLLER_IMAGE, 'release-controller', '/usr/local/bin/node', '/usr/local/lib/rcm/rcm-controller.js', '--help']);
      check(`the controller image runs --help, its default installer image of version ${version}`, controllerHelp.includes(`rcm-node-installer:${version}`),
        controllerHelp.split('\n').filter(l => l.includes('installer-image')).join('\n'));
    } finally {
      await containerd.stop();
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  if (failures.length > 0) throw new Error(`${failures.length} check(s) failed: ${failures.join('; ')}`);
}

main().then(() => log('all checks passed'), e => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
});
