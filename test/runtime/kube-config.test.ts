import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { inClusterAccess, kubeconfigAccess, TokenFile } from '../../src/shared/kube/kube-config';

// How the controller finds and authenticates to the API server. The real use (a kubeconfig
// with a CA file and a token) runs in every integration test; these cover the other shapes.

let dir: string;
beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-kubeconfig-'))));
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

const b64 = (s: string) => Buffer.from(s).toString('base64');

test('the current context: inline CA and client certificate, no token', () => {
  // GIVEN a kubeconfig with two contexts and inline (base64) TLS material
  const file = write('config', [
    'apiVersion: v1', 'kind: Config', 'current-context: prod',
    'clusters:',
    '- {name: dev, cluster: {server: "https://dev.example:6443"}}',
    `- {name: prod, cluster: {server: "https://prod.example:6443", certificate-authority-data: "${b64('CA')}", tls-server-name: kubernetes}}`,
    'users:',
    `- {name: ops, user: {client-certificate-data: "${b64('CERT')}", client-key-data: "${b64('KEY')}"}}`,
    'contexts:',
    '- {name: dev, context: {cluster: dev, user: ops}}',
    '- {name: prod, context: {cluster: prod, user: ops}}',
  ].join('\n'));
  // WHEN it is loaded
  const access = kubeconfigAccess(file);
  // THEN the current context's cluster and user are used
  expect(access.server.href).toBe('https://prod.example:6443/');
  expect(access.ca?.toString()).toBe('CA');
  expect(access.cert?.toString()).toBe('CERT');
  expect(access.key?.toString()).toBe('KEY');
  expect(access.serverName).toBe('kubernetes');
  expect(access.insecure).toBe(false);
  expect(access.authorization()).toBeUndefined();
  // AND another context can be named
  expect(kubeconfigAccess(file, 'dev').server.host).toBe('dev.example:6443');
});

test('files named relative to the kubeconfig, and a token file re-read after a minute', () => {
  // GIVEN a kubeconfig whose CA and token are files beside it
  write('pki/ca.crt', 'CA FILE');
  const tokenFile = write('token', 'first\n');
  const file = write('config', [
    'current-context: c',
    'clusters: [{name: k, cluster: {server: "https://127.0.0.1:6443", certificate-authority: pki/ca.crt}}]',
    'users: [{name: u, user: {tokenFile: token}}]',
    'contexts: [{name: c, context: {cluster: k, user: u}}]',
  ].join('\n'));
  // WHEN it is loaded
  const access = kubeconfigAccess(file);
  // THEN the files are found beside it
  expect(access.ca?.toString()).toBe('CA FILE');
  expect(access.authorization()).toBe('Bearer first');
  // AND a rotated token is read, but not on every request
  let now = 0;
  const token = new TokenFile(tokenFile, () => now);
  fs.writeFileSync(tokenFile, 'second');
  now = 59_000;
  expect(token.get()).toBe('first');
  now = 60_000;
  expect(token.get()).toBe('second');
  // AND a token file that is briefly missing (being swapped) keeps the last token
  fs.rmSync(tokenFile);
  now = 200_000;
  expect(token.get()).toBe('second');
});

test('a static token, basic auth and insecure-skip-tls-verify', () => {
  const file = write('config', [
    'current-context: c',
    'clusters: [{name: k, cluster: {server: "https://[::1]:6443", insecure-skip-tls-verify: true}}]',
    'users: [{name: t, user: {token: abc}}, {name: b, user: {username: admin, password: secret}}]',
    'contexts: [{name: c, context: {cluster: k, user: t}}, {name: basic, context: {cluster: k, user: b}}]',
  ].join('\n'));
  const access = kubeconfigAccess(file);
  expect(access.insecure).toBe(true);
  expect(access.server.hostname).toBe('[::1]');
  expect(access.authorization()).toBe('Bearer abc');
  expect(kubeconfigAccess(file, 'basic').authorization()).toBe(`Basic ${b64('admin:secret')}`);
});

test('what it cannot use is refused with the reason, at start-up', () => {
  const file = (user: string, extra = '') => write(`config-${Math.random()}`, [
    'current-context: c',
    `clusters: [{name: k, cluster: {server: "https://127.0.0.1:6443"${extra}}}]`,
    `users: [{name: u, user: ${user}}]`,
    'contexts: [{name: c, context: {cluster: k, user: u}}]',
  ].join('\n'));
  expect(() => kubeconfigAccess(file('{exec: {command: aws}}'))).toThrow(/user "u" authenticates with exec, which rcm-controller does not run/);
  expect(() => kubeconfigAccess(file('{auth-provider: {name: oidc}}'))).toThrow(/auth-provider/);
  expect(() => kubeconfigAccess(file('{token: x}'), 'other')).toThrow(/no context named "other"/);
  expect(() => kubeconfigAccess(file('{token: x}', ', certificate-authority: missing.crt'))).toThrow(/ENOENT/);
  expect(() => kubeconfigAccess(write('empty', ''))).toThrow(/no current-context/);
});

test('in-cluster: the service account token and CA, the service address from the environment', () => {
  // GIVEN a service account folder as the kubelet mounts it
  write('sa/token', 'pod-token');
  write('sa/ca.crt', 'CLUSTER CA');
  // WHEN the access is built from the pod's environment
  const access = inClusterAccess({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' }, path.join(dir, 'sa'));
  // THEN it dials the service (an IPv6 address in brackets) with the pod's token
  expect(access.server.href).toBe('https://[fd00::1]/');
  expect(access.ca?.toString()).toBe('CLUSTER CA');
  expect(access.authorization()).toBe('Bearer pod-token');
  // AND outside a cluster the error says what to do
  expect(() => inClusterAccess({}, path.join(dir, 'sa'))).toThrow(/pass --kubeconfig/);
});
