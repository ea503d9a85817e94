import { proxyFor } from '../../src/installer/proxy';

test.each([
  ['https uses HTTPS_PROXY', 'https://github.com/x', { HTTPS_PROXY: 'http://proxy:3128' }, 'http://proxy:3128/'],
  ['http uses HTTP_PROXY', 'http://e.com/x', { HTTP_PROXY: 'proxy:8080' }, 'http://proxy:8080/'],
  ['lowercase names work', 'https://e.com/x', { https_proxy: 'http://p:1' }, 'http://p:1/'],
  ['no proxy set', 'https://e.com/x', {}, undefined],
  ['NO_PROXY domain suffix', 'https://objects.github.com/x', { HTTPS_PROXY: 'http://p:1', NO_PROXY: '.github.com' }, undefined],
  ['NO_PROXY exact host', 'https://github.com/x', { HTTPS_PROXY: 'http://p:1', NO_PROXY: 'example.org, github.com' }, undefined],
  ['NO_PROXY with another port', 'https://github.com/x', { HTTPS_PROXY: 'http://p:1', NO_PROXY: 'github.com:8443' }, 'http://p:1/'],
  ['NO_PROXY *', 'https://github.com/x', { HTTPS_PROXY: 'http://p:1', NO_PROXY: '*' }, undefined],
  ['a suffix is not a substring', 'https://notgithub.com/x', { HTTPS_PROXY: 'http://p:1', NO_PROXY: 'github.com' }, 'http://p:1/'],
])('%s', (_what, url, env, expected) => {
  expect(proxyFor(new URL(url), env)?.toString()).toBe(expected);
});
