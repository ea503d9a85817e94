import { entrypointOf, nodeFlagsOf } from '../support/dockerfile';

// The test images and the controller benchmark take the controller's node flags from
// images/Dockerfile (test/support/dockerfile.ts): this reads them as they do.

const DOCKERFILE = `FROM node:24-bookworm-slim AS runtime
FROM runtime AS controller
ENTRYPOINT ["node", "--max-semi-space-size=4", "/usr/local/lib/rcm/rcm-controller.js"]
FROM runtime AS node-installer
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

test('the controller image of this tree runs node with a bounded young generation', () => {
  const flags = nodeFlagsOf('controller');
  expect(flags).toContain('--max-semi-space-size=4');
  expect(entrypointOf('controller').at(-1)).toBe('/usr/local/lib/rcm/rcm-controller.js');
});
