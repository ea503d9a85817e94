import { ApiObject, JsonPatch } from 'cdk8s';
import { RuntimeClassManager } from '../../src';

// What every end-to-end suite shares, single-node (e2e-app.ts, new-user-path.test.ts) and
// multi-node (fleet-app.ts): the test-only wiring of the synthesized controller for a test
// cluster, the server-side apply of an app, and a step whose failure carries the diagnostics.

/**
 * The environment that points a pod at the API server on 127.0.0.1: the test clusters have no
 * kube-proxy, so the service address in-cluster clients use by default leads nowhere.
 */
export function apiServerEnv(port: number | string): Array<{ name: string; value: string }> {
  return [
    { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' },
    { name: 'KUBERNETES_SERVICE_PORT', value: String(port) },
  ];
}

const CONTAINER = '/spec/template/spec/containers/0';
const LISTENERS = ['--metrics-bind-address', '--health-probe-bind-address'];

/**
 * The test-only wiring of the app for a test cluster, through escape hatches: the controller pod
 * uses the host network, reaches the API server on 127.0.0.1, has no probes (the kubelet would
 * dial the node's non-loopback address) and listens on 127.0.0.1 only (the construct binds every
 * address): on the ports the app set or, with `anyPort` (several nodes sharing the machine's
 * network), on ports of the kernel's choosing and without container ports. The node agent,
 * where there is one, reaches the API server the same way.
 */
export function wireForTestCluster(manager: RuntimeClassManager, apiPort: number, options: { anyPort?: boolean } = {}): void {
  const apiServer = apiServerEnv(apiPort).map(e => JsonPatch.add(`${CONTAINER}/env/-`, e));
  ApiObject.of(manager.deployment).addJsonPatch(
    JsonPatch.add('/spec/template/spec/hostNetwork', true),
    ...apiServer,
    JsonPatch.remove(`${CONTAINER}/livenessProbe`),
    JsonPatch.remove(`${CONTAINER}/readinessProbe`),
    ...(options.anyPort ? [JsonPatch.remove(`${CONTAINER}/ports`)] : []),
    ...bindToLoopback(manager.deployment, options.anyPort ? '0' : undefined),
  );
  if (manager.nodeAgent) ApiObject.of(manager.nodeAgent).addJsonPatch(...apiServer);
}

/** Patches that make the controller listen on 127.0.0.1 only, on `port` or on the port the construct gave. */
function bindToLoopback(deployment: ApiObject, port?: string): JsonPatch[] {
  const args: string[] = deployment.toJson().spec.template.spec.containers[0].args;
  return LISTENERS.map(flag => {
    const index = args.findIndex(a => a.startsWith(`${flag}=:`));
    if (index < 0) throw new Error(`the controller has no ${flag}=:<port> argument: ${args.join(' ')}`);
    return JsonPatch.replace(`${CONTAINER}/args/${index}`, `${flag}=127.0.0.1:${port ?? args[index].slice(`${flag}=:`.length)}`);
  });
}

/**
 * `kubectl apply --server-side` of a manifest file, as a user without Argo CD does it. The first
 * apply creates the CRD together with a Shim: kubectl knows the kind only once the CRD is
 * established (Argo CD orders this with the sync waves the constructs set).
 */
export function applyServerSide(kubectl: (args: string[]) => string, file: string, extra: string[] = []): void {
  try {
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', ...extra, '-f', file]);
  } catch (e) {
    if (!/no matches for kind "Shim"/.test(String((e as any).stderr ?? e))) throw e;
    kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', ...extra, '-f', file]);
  }
}

/**
 * A scenario step: a test whose failure message carries `diagnostics()`, and after which
 * `cleanup` runs, pass or fail. Steps build on the ones before them.
 */
export function diagnosedStep(name: string, fn: () => Promise<void>, diagnostics: () => Promise<string>, timeoutMs: number,
  cleanup?: () => void): void {
  test(name, async () => {
    try {
      await fn();
    } catch (e) {
      (e as Error).message += `\n${await diagnostics()}`;
      throw e;
    } finally {
      cleanup?.();
    }
  }, timeoutMs);
}
