// Where the API server is and how to authenticate to it: in-cluster (the pod's service
// account) or a kubeconfig file. This replaces @kubernetes/client-node's KubeConfig, whose
// import alone costs the controller some 65 MiB of resident memory and a third of a second of
// CPU at start-up, for the handful of fields read here.
import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'yaml';

/** How to reach and authenticate to the API server. */
export interface ClusterAccess {
  readonly server: URL;
  /** PEM bundle of the CA that signed the server's certificate; the system's CAs when absent. */
  readonly ca?: Buffer;
  /** Client certificate and key (PEM). */
  readonly cert?: Buffer;
  readonly key?: Buffer;
  /** insecure-skip-tls-verify. */
  readonly insecure: boolean;
  /** The TLS server name to verify, when it differs from the server's host. */
  readonly serverName?: string;
  /** The Authorization header value, if any (re-read from a token file as it rotates). */
  authorization(): string | undefined;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
/**
 * A token file is read again after this long, as client-go does: the kubelet rotates a
 * projected service account token well before it expires.
 */
const TOKEN_REREAD_MS = 60_000;

/** A bearer token read from a file, cached for a minute; the last good token survives a failed read. */
export class TokenFile {
  private token?: string;
  private readAt = 0;

  constructor(private readonly file: string, private readonly now: () => number = Date.now) {
    this.read(); // an unreadable token file is a start-up error
  }

  get(): string {
    if (this.now() - this.readAt >= TOKEN_REREAD_MS) {
      try {
        this.read();
      } catch {
        // Keep the previous token: the file is being replaced (an atomic swap of a symlink).
      }
    }
    return this.token!;
  }

  private read(): void {
    this.token = fs.readFileSync(this.file, 'utf8').trim();
    this.readAt = this.now();
  }
}

/** The service account of the pod this runs in. */
export function inClusterAccess(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT): ClusterAccess {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) throw new Error('not running in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset): pass --kubeconfig');
  const token = new TokenFile(path.join(dir, 'token'));
  return {
    server: new URL(`https://${host.includes(':') ? `[${host}]` : host}:${port}`),
    ca: fs.readFileSync(path.join(dir, 'ca.crt')),
    insecure: false,
    authorization: () => `Bearer ${token.get()}`,
  };
}

/** A kubeconfig file's current context (or the named one). */
export function kubeconfigAccess(file: string, contextName?: string): ClusterAccess {
  const doc = parse(fs.readFileSync(file, 'utf8')) ?? {};
  const where = `kubeconfig ${file}`;
  const named = (list: any, name: string, kind: string) => {
    const entry = (Array.isArray(list) ? list : []).find((e: any) => e?.name === name);
    if (!entry) throw new Error(`${where}: no ${kind} named "${name}"`);
    return entry[kind] ?? {};
  };
  const current = contextName ?? doc['current-context'];
  if (!current) throw new Error(`${where}: no current-context`);
  const context = named(doc.contexts, current, 'context');
  const cluster = named(doc.clusters, context.cluster, 'cluster');
  const user = context.user ? named(doc.users, context.user, 'user') : {};
  if (!cluster.server) throw new Error(`${where}: cluster "${context.cluster}" has no server`);
  // Relative paths in a kubeconfig are relative to the file.
  const resolve = (p: string) => path.resolve(path.dirname(file), p);
  const material = (data: string | undefined, fileName: string | undefined) =>
    data ? Buffer.from(data, 'base64') : fileName ? fs.readFileSync(resolve(fileName)) : undefined;
  for (const unsupported of ['exec', 'auth-provider']) {
    if (user[unsupported]) {
      throw new Error(`${where}: user "${context.user}" authenticates with ${unsupported}, which rcm-controller does not run; use a token, a token file or a client certificate`);
    }
  }
  let authorization: () => string | undefined = () => undefined;
  if (user.token) {
    authorization = () => `Bearer ${user.token}`;
  } else if (user.tokenFile) {
    const token = new TokenFile(resolve(user.tokenFile));
    authorization = () => `Bearer ${token.get()}`;
  } else if (user.username !== undefined) {
    const basic = Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64');
    authorization = () => `Basic ${basic}`;
  }
  return {
    server: new URL(cluster.server),
    ca: material(cluster['certificate-authority-data'], cluster['certificate-authority']),
    cert: material(user['client-certificate-data'], user['client-certificate']),
    key: material(user['client-key-data'], user['client-key']),
    insecure: cluster['insecure-skip-tls-verify'] === true,
    ...(cluster['tls-server-name'] ? { serverName: cluster['tls-server-name'] } : {}),
    authorization,
  };
}
