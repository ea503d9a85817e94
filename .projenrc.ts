import { cdk8s, javascript } from 'projen';

// The programs bundled into single files (the images need only `node`).
const bundles = [
  { entry: 'src/runtime/main.ts', out: 'lib/rcm-controller.js' },
  { entry: 'src/installer/main.ts', out: 'lib/rcm-node-installer.js' },
  { entry: 'src/agent/main.ts', out: 'lib/rcm-node-agent.js' },
];

const project = new cdk8s.ConstructLibraryCdk8s({
  name: 'runtime-class-manager-cdk8s',
  description: 'Install containerd shims (Spin, wasmtime, Kata, gVisor, ...) on Kubernetes nodes: cdk8s constructs, a controller and a node installer.',
  author: 'runtime-class-manager-cdk8s authors',
  authorAddress: 'maintainers@runtime-class-manager-cdk8s.dev',
  repositoryUrl: 'https://github.com/runtime-class-manager-cdk8s/runtime-class-manager-cdk8s.git',
  defaultReleaseBranch: 'main',
  packageManager: javascript.NodePackageManager.NPM,
  projenrcTs: true,
  // Consumers' floor (package.json engines): the library's JavaScript still runs on 20.19, which
  // the end-to-end suites use. The release jobs run on Node.js 24 as CI's unit tests and release
  // dry run do (Node.js 20 is end of life; projen's changelog packages want 22 or later).
  minNodeVersion: '20.19.0',
  workflowNodeVersion: '24.x',
  jsiiVersion: '~5.9.0',
  typescriptVersion: '~5.9.0',
  cdk8sVersion: '2.68.12',
  constructsVersion: '10.3.0',
  // The release path of cdk8s construct libraries: projen's release workflow on GitHub
  // Actions, versions bumped from conventional commits (feat: minor, fix: patch; 0.x until
  // a major is chosen), the npm package and the jsii packages for Python, Java, .NET and Go.
  github: true,
  githubOptions: { mergify: false, pullRequestLint: false },
  pullRequestTemplate: false,
  release: true,
  releaseToNpm: true,
  depsUpgrade: false,
  buildWorkflow: false,
  publishToPypi: { distName: 'runtime-class-manager-cdk8s', module: 'runtime_class_manager_cdk8s' },
  publishToMaven: {
    javaPackage: 'dev.runtimeclassmanager.cdk8s',
    mavenGroupId: 'dev.runtime-class-manager-cdk8s',
    mavenArtifactId: 'runtime-class-manager-cdk8s',
  },
  publishToNuget: { dotNetNamespace: 'RuntimeClassManager.Cdk8s', packageId: 'RuntimeClassManager.Cdk8s' },
  publishToGo: { moduleName: 'github.com/runtime-class-manager-cdk8s/runtime-class-manager-cdk8s-go' },
  docgen: true,
  keywords: ['cdk8s', 'kubernetes', 'containerd', 'runtimeclass', 'wasm', 'shim'],

  // Sources live in src/ and the generated CRD classes in imports/; rootDir "." keeps both
  // trees side by side under lib/ (lib/src, lib/imports).
  srcdir: 'src',
  libdir: 'lib',
  entrypoint: 'lib/src/index.js',

  tsconfig: {
    compilerOptions: { rootDir: '.' },
    include: ['imports/**/*.ts'],
  },
  // The controller and the node installer are not part of the jsii API: they are
  // type-checked by their own tsconfig and bundled by esbuild (post-compile). src/shared/
  // holds what the programs use; its logging, flag parsing and API client are theirs alone, while
  // the label scheme and the shape checks are the constructs' too (and so compiled by jsii).
  excludeTypescript: ['src/runtime/**', 'src/installer/**', 'src/agent/**', 'src/shared/log.ts', 'src/shared/flags.ts', 'src/shared/kube/**'],

  // The constructs build their objects with cdk8s-plus-28 (issue 25). A plain dependency, not a
  // peer: no cdk8s-plus type is part of this library's API (jsii asks for a peer dependency only
  // for exposed types), so a user's app needs nothing of it and keeps its own cdk8s-plus-NN
  // (a fresh `cdk8s init` app has cdk8s-plus-33); npm installs it beside the app's cdk8s, which
  // it shares (cdk8s and constructs are its peer dependencies), and the jsii targets name it as
  // an ordinary dependency (PyPI, Maven, NuGet and Go all publish cdk8s-plus-28).
  deps: ['cdk8s-plus-28@^2.5.6'],
  devDeps: [
    'cdk8s-cli@^2.200.0',
    'esbuild@^0.25.0',
    '@kubernetes/client-node@^1.4.0',
    'smol-toml@^1.3.0',
    'tar@^7.4.0',
    'prom-client@^15.1.0',
    'yaml@^2.6.0',
    'ajv@^8.17.0', // the docs test validates Shims in YAML blocks against the CRD's schema
    'ts-node',
  ],
  jestOptions: {
    jestVersion: '^29', // jest 30 pulls unrs-resolver too (see devDeps)
    // Snapshots are checked, never silently rewritten: `npx jest -u` updates them on purpose.
    updateSnapshot: javascript.UpdateSnapshot.NEVER,
    jestConfig: {
      testTimeout: 120_000,
      testPathIgnorePatterns: ['/node_modules/', '/test/e2e/', '/test/e2e-multinode/'],
      coveragePathIgnorePatterns: ['/node_modules/', '/imports/'],
      maxWorkers: 2,
    },
  },
  eslintOptions: {
    dirs: ['src'],
    ignorePatterns: ['imports/**', '*.js', '*.d.ts', 'node_modules/'],
  },
  gitignore: ['/.cache/', '/test-reports/', '/coverage/'],
});

// Pinned below the releases that pull unrs-resolver: npm 11 leaves its per-platform optional
// bindings out of package-lock.json, and `npm ci` then refuses the lock file.
project.deps.removeDependency('eslint-import-resolver-typescript');
project.addDevDeps('eslint-import-resolver-typescript@~3.6.3');

// jsii and TypeScript consumers find the declarations beside the entrypoint.
project.package.addField('types', 'lib/src/index.d.ts');
// The library's files only: the two program bundles (6.7 MB) run in the images, which are
// built from the repository, so neither the npm package nor the jsii packages (which embed
// it) carry them. They are attached to each GitHub release instead.
project.addFields({
  files: ['lib/src/**/*.js', 'lib/src/**/*.d.ts', 'lib/imports/**/*.js', 'lib/imports/**/*.d.ts',
    'crds/*.yaml', 'argocd/*.lua', '.jsii', 'API.md', 'README.md'],
});

// The CRD YAML is the one source of truth: the typed classes in imports/ are generated from it.
project.addTask('import', {
  description: 'Generate the typed Shim classes in imports/ from crds/shims.runtime.spinkube.dev.yaml',
  exec: 'cdk8s import crds/shims.runtime.spinkube.dev.yaml --language typescript --output imports',
});

const typecheckPrograms = project.addTask('typecheck:programs', {
  description: 'Type-check the controller and the node installer (not part of the jsii API)',
  exec: 'tsc -p tsconfig.programs.json',
});
const bundle = project.addTask('bundle:programs', {
  description: 'Bundle the controller and the node installer into single files under lib/',
});
for (const b of bundles) {
  // RCM_VERSION: the package version, which the release has bumped by now (default image tags).
  bundle.exec(`esbuild ${b.entry} --bundle --platform=node --target=node20 --format=cjs --sourcemap=inline --banner:js='#!/usr/bin/env node' `
    + `--define:RCM_VERSION="\\"$(node -p 'require(\"./package.json\").version')\\"" --outfile=${b.out}`);
  bundle.exec(`chmod +x ${b.out}`);
}
project.postCompileTask.spawn(typecheckPrograms);
project.postCompileTask.spawn(bundle);

// The programs' libraries are bundled into lib/*.js by esbuild: devDependencies on purpose.
project.eslint?.addOverride({
  files: ['src/agent/**', 'src/installer/**', 'src/runtime/**', 'src/shared/log.ts', 'src/shared/flags.ts', 'src/shared/kube/**'],
  rules: { 'import/no-extraneous-dependencies': 'off' },
});

project.addTask('example', {
  description: 'Synthesize every app in examples/ into dist/<app>/',
  exec: 'node scripts/synth-examples.js',
});

// Tests provision what they need (Debian packages, the cached control plane) first.
project.testTask.prependExec('bash scripts/provision.sh');

project.addTask('e2e', {
  description: 'End-to-end suite on a single-node cluster: Kubernetes 1.37 and containerd 2.4 built from the Go module proxy (root required)',
  exec: 'bash scripts/provision.sh && jest --ci --runInBand --coverage=false --testPathIgnorePatterns /node_modules/ --testMatch "<rootDir>/test/e2e/**/*.test.ts"',
});
// The oldest Kubernetes the project supports (test/support/tools.ts: KUBE_OLDEST) runs the new
// user's path (the README's quick start, unchanged) and the Shim life cycle.
project.addTask('e2e:oldest', {
  description: 'The single-node suite\'s quick start and Shim life cycle on the oldest supported Kubernetes, 1.34 (root required)',
  env: { RCM_KUBE_VERSION: '1.34.4' },
  exec: 'bash scripts/provision.sh && jest --ci --runInBand --coverage=false --testPathIgnorePatterns /node_modules/ --testMatch "<rootDir>/test/e2e/new-user-path.test.ts" "<rootDir>/test/e2e/shim-lifecycle.test.ts"',
});
project.addTask('e2e:multinode', {
  description: 'End-to-end suite on three real nodes on one machine (two boot systemd with Debian\'s containerd.service, containerd 2.4 and 1.7; a k3s-shaped node on 1.6; root required)',
  exec: 'bash scripts/provision.sh && jest --ci --runInBand --coverage=false --testPathIgnorePatterns /node_modules/ --testMatch "<rootDir>/test/e2e-multinode/**/*.test.ts"',
});
project.addTask('images', {
  description: 'Build the controller and node-installer images as OCI tarballs without Docker (into dist/images/)',
  exec: 'ts-node --transpile-only -P tsconfig.json test/support/product-images.ts dist/images',
});
// The release also builds the two images from images/Dockerfile, tagged with the package
// version (the constructs default to that tag), and attaches the bundles to the release.
project.release?.addJobs({
  release_images: {
    name: 'Publish the controller and node-installer images',
    needs: ['release', 'release_github'],
    runsOn: ['ubuntu-latest'],
    permissions: { contents: 'write' as any, packages: 'write' as any },
    if: 'needs.release.outputs.latest_commit == github.sha',
    steps: [
      { uses: 'actions/checkout@v4' },
      { uses: 'actions/download-artifact@v4', with: { name: 'build-artifact', path: 'dist' } },
      { uses: 'docker/setup-buildx-action@v3' },
      { uses: 'docker/login-action@v3', with: { registry: 'ghcr.io', username: '${{ github.actor }}', password: '${{ secrets.GITHUB_TOKEN }}' } },
      {
        name: 'Build and push',
        run: [
          'version=$(cat dist/version.txt)',
          'for target in controller node-installer; do',
          '  docker buildx build -f images/Dockerfile --target "$target" --platform linux/amd64,linux/arm64 --push \\',
          '    -t "ghcr.io/runtime-class-manager-cdk8s/rcm-$target:$version" .',
          'done',
        ].join('\n'),
      },
      {
        name: 'Attach the program bundles to the release',
        env: { GH_TOKEN: '${{ secrets.GITHUB_TOKEN }}' },
        run: [
          'version=$(cat dist/version.txt)',
          'npm ci --no-audit --no-fund && npx projen bundle:programs',
          'gh release upload "v$version" lib/rcm-controller.js lib/rcm-node-installer.js --repo "$GITHUB_REPOSITORY"',
        ].join('\n'),
      },
    ],
  },
});

// The release build runs the whole test suite, which needs what CI has (.ci/run): a Debian 12
// machine, root, the Debian archive (scripts/provision.sh builds the test control plane from
// Debian's Kubernetes source package). GitHub's hosted runners are Ubuntu without root, so
// that one job runs on a self-hosted Debian 12 runner; the publishing jobs stay hosted.
project.github?.tryFindWorkflow('release')?.file?.addOverride('jobs.release.runs-on', ['self-hosted', 'linux', 'debian-12']);

project.addTask('bench', {
  description: 'Run the benchmarks (prints figures and ratios against a baseline)',
  exec: 'bash bench/run-all.sh',
});

project.synth();
