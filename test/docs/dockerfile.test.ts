import { entrypointOf, environmentOf, nodeFlagsOf } from '../support/dockerfile';

// The test images and the controller benchmark take the controller's node flags and
// environment from images/Dockerfile (test/support/dockerfile.ts): this reads them as they do.

const DOCKERFILE = `FROM node:24-bookworm-slim AS runtime
ENV LANG=C.UTF-8
FROM runtime AS controller
ENV MALLOC_ARENA_MAX=2
ENTRYPOINT ["node", "--max-semi-space-size=4", "/usr/local/lib/rcm/rcm-controller.js"]
FROM runtime AS node-installer
ENV NODE_COMPILE_CACHE=/usr/local/lib/rcm/compile-cache NODE_COMPILE_CACHE_PORTABLE=1
ENTRYPOINT ["node", "/usr/local/lib/rcm/rcm-node-installer.js"]
CMD ["--help"]
`;

test('each stage\'s ENTRYPOINT, and the node flags before its program', () => {
  expect(entrypointOf('controller', DOCKERFILE)).toEqual(['node', '--max-semi-space-size=4', '/usr/local/lib/rcm/rcm-controller.js']);
  expect(nodeFlagsOf('controller', DOCKERFILE)).toEqual(['--max-semi-space-size=4']);
  expect(nodeFlagsOf('node-installer', DOCKERFILE)).toEqual([]);
});

test('a stage without an exec-form ENTRYPOINT is an error naming it', () => {
  expect(() => entrypointOf('runtime', DOCKERFILE)).toThrow(/no exec-form ENTRYPOINT in stage runtime/);
  expect(() => entrypointOf('absent', DOCKERFILE)).toThrow(/stage absent/);
});

test('the controller image of this tree runs node with a bounded young generation and an old one that grows by half', () => {
  const flags = nodeFlagsOf('controller');
  expect(flags).toContain('--max-semi-space-size=4');
  expect(flags).toContain('--heap-growing-percent=50');
  expect(entrypointOf('controller').at(-1)).toBe('/usr/local/lib/rcm/rcm-controller.js');
});

test('each stage\'s environment: its own ENV lines and those of the stages it is built from', () => {
  expect(environmentOf('controller', DOCKERFILE)).toEqual({ LANG: 'C.UTF-8', MALLOC_ARENA_MAX: '2' });
  expect(environmentOf('node-installer', DOCKERFILE)).toEqual({
    LANG: 'C.UTF-8', NODE_COMPILE_CACHE: '/usr/local/lib/rcm/compile-cache', NODE_COMPILE_CACHE_PORTABLE: '1',
  });
  expect(environmentOf('runtime', DOCKERFILE)).toEqual({ LANG: 'C.UTF-8' });
});

test('an ENV line it cannot read is an error naming the line, and so is a stage that is not there', () => {
  const quoted = 'FROM node:24-bookworm-slim AS controller\nENV GREETING="hello world"\n';
  expect(() => environmentOf('controller', quoted)).toThrow(/cannot read "ENV GREETING=\"hello world\""/);
  const continued = 'FROM node:24-bookworm-slim AS controller\nENV A=1 \\\n  B=2\n';
  expect(() => environmentOf('controller', continued)).toThrow(/cannot read "ENV A=1 \\"/);
  expect(() => environmentOf('absent', DOCKERFILE)).toThrow(/no stage absent/);
});

test('the controller image of this tree keeps glibc to two malloc arenas', () => {
  expect(environmentOf('controller')).toEqual({ MALLOC_ARENA_MAX: '2' });
  expect(environmentOf('node-installer')).toEqual({ NODE_COMPILE_CACHE: '/usr/local/lib/rcm/compile-cache', NODE_COMPILE_CACHE_PORTABLE: '1' });
});
