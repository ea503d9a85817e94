// The runtime-class-manager and two Wasm shims, Spin and wasmtime, with one artifact per
// node platform. `npx projen example` synthesizes it into dist/wasm-shims/.
//
// Pin each artifact's sha256 in production (sha256: '...' on every platform entry): the
// installer verifies it before anything on the node changes, and warns loudly without it.
import { ApiObject, App, Chart } from 'cdk8s';
import { Construct } from 'constructs';
import { MaxUpdate, RuntimeClassManager, Rollout } from '../../src';

const SPIN = 'https://github.com/spinframework/containerd-shim-spin/releases/download/v0.19.0';
const WASMTIME = 'https://github.com/containerd/runwasi/releases/download/containerd-shim-wasmtime%2Fv0.6.0';

export class WasmShims extends Chart {
  constructor(scope: Construct, id: string) {
    super(scope, id);

    const manager = new RuntimeClassManager(this, 'Manager');

    const spin = manager.addShim('spin-v2', {
      handler: 'spin',
      runtimeClassName: 'wasmtime-spin-v2',
      nodeSelector: { 'spin.example.com/enabled': 'true' },
      platforms: [
        { os: 'linux', arch: 'amd64', location: `${SPIN}/containerd-shim-spin-v2-linux-x86_64.tar.gz` },
        { os: 'linux', arch: 'arm64', location: `${SPIN}/containerd-shim-spin-v2-linux-aarch64.tar.gz` },
      ],
      rollout: Rollout.rolling({ maxUpdate: MaxUpdate.percent(25) }),
      overhead: { memory: '32Mi', cpu: '10m' },
    });

    manager.addShim('wasmtime-v1', {
      handler: 'wasmtime',
      platforms: [
        { os: 'linux', arch: 'amd64', location: `${WASMTIME}/containerd-shim-wasmtime-x86_64-linux-musl.tar.gz` },
        { os: 'linux', arch: 'arm64', location: `${WASMTIME}/containerd-shim-wasmtime-aarch64-linux-musl.tar.gz` },
      ],
      rollout: Rollout.rolling({ maxUpdate: MaxUpdate.count(2) }),
    });

    // A workload under the Spin shim's RuntimeClass: a cdk8s-plus Deployment works the same
    // way (spin.runWorkload(deployment)). At Argo CD's default wave 0, it starts only once the
    // Shims (wave -10) are healthy, i.e. installed.
    const hello = new ApiObject(this, 'hello-spin', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'hello-spin', namespace: 'default' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'hello-spin' } },
        template: {
          metadata: { labels: { app: 'hello-spin' } },
          spec: { containers: [{ name: 'hello', image: 'ghcr.io/spinframework/containerd-shim-spin/examples/spin-rust-hello:v0.19.0', command: ['/'] }] },
        },
      },
    });
    spin.runWorkload(hello);
  }
}

if (require.main === module) {
  const app = new App();
  new WasmShims(app, 'wasm-shims');
  app.synth();
}
