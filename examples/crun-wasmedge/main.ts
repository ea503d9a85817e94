// A WebAssembly runtime as a Shim: crun built with its WasmEdge handler (Debian trixie's),
// installed on each node as one payload folder (crun, its libraries with their own loader and
// libc, and containerd's runc shim), and a Deployment of a WASI module under it.
// `npx projen example` synthesizes it into dist/crun-wasmedge/.
//
// Make the payload with scripts/build-wasm-payload.sh (Debian's archive alone; any Debian or
// Ubuntu machine, no root), publish the .tar.gz, and pin the sha256 the script prints:
//
//   scripts/build-wasm-payload.sh ./crun-wasmedge ./crun-wasmedge.tar.gz
//   PAYLOAD_URL=https://artifacts.example.com/crun-wasmedge.tar.gz PAYLOAD_SHA256=<printed> npx projen example
//
// The end-to-end suite (test/e2e/shim-lifecycle.test.ts) runs exactly this shape: a WASI
// module's image (one layer holding the .wasm, its entrypoint) runs to Succeeded with its
// output in the pod's log; without the annotation crun runs it as a program and fails with
// "Exec format error". Amd64 nodes only (the payload is built for x86-64).
import { ApiObject, App, Chart } from 'cdk8s';
import { Construct } from 'constructs';
import { MaxUpdate, RuntimeClassManager, Rollout } from '../../src';

/** crun runs a container's entrypoint as a Wasm module when the pod carries this annotation. */
const WASM_VARIANT = 'module.wasm.image/variant';

export class CrunWasmEdge extends Chart {
  constructor(scope: Construct, id: string) {
    super(scope, id);

    const manager = new RuntimeClassManager(this, 'Manager');

    const wasmedge = manager.addShim('crun-wasmedge', {
      handler: 'crun-wasmedge',
      runtimeClassName: 'wasmedge',
      nodeSelector: { 'kubernetes.io/arch': 'amd64' },
      location: process.env.PAYLOAD_URL ?? 'https://artifacts.example.com/crun-wasmedge.tar.gz',
      // Set it: the installer verifies the payload before anything on the node changes (and
      // warns loudly without it).
      sha256: process.env.PAYLOAD_SHA256,
      // The payload is a folder of files; containerd's runc shim in it drives crun through
      // runc's BinaryName option. ${PAYLOAD} is the installed folder on the node.
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
      // containerd passes a pod's annotations to the runtime only where the handler lets them through.
      containerdRuntime: {
        podAnnotations: [WASM_VARIANT, 'run.oci.handler'],
        containerAnnotations: [WASM_VARIANT, 'run.oci.handler'],
      },
      // What every workload of this runtime needs: runWorkload() puts it on the pod template.
      workloadAnnotations: { [WASM_VARIANT]: 'compat' },
      rollout: Rollout.rolling({ maxUpdate: MaxUpdate.percent(25) }),
    });

    // A WASI module under the Shim. Its image holds the .wasm file as its entrypoint (no shell,
    // no libc); runWorkload() sets runtimeClassName: wasmedge and the annotation above on the
    // pod template. A cdk8s-plus Deployment works the same way (wasmedge.runWorkload(deployment)).
    const hello = new ApiObject(this, 'hello-wasm', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'hello-wasm', namespace: 'default' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'hello-wasm' } },
        template: {
          metadata: { labels: { app: 'hello-wasm' } },
          spec: { containers: [{ name: 'hello', image: 'registry.example.com/hello-wasm:1' }] },
        },
      },
    });
    wasmedge.runWorkload(hello);
  }
}

if (require.main === module) {
  const app = new App();
  new CrunWasmEdge(app, 'crun-wasmedge');
  app.synth();
}
