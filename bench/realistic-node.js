// A Node as a real kubelet reports it (about 14 KB of JSON): labels, addresses, capacity,
// allocatable, conditions, nodeInfo and 50 images. Used by the controller benchmark, whose
// figures mean little with empty Node objects.
const crypto = require('crypto');

function digest(seed) {
  return crypto.createHash('sha256').update(seed).digest('hex');
}

/** The object to create (metadata and spec) and the status to write through /status. */
function realisticNode(name, index) {
  const zone = `zone-${'abc'[index % 3]}`;
  const now = new Date().toISOString();
  const condition = (type, status, reason, message) => ({ type, status, reason, message, lastHeartbeatTime: now, lastTransitionTime: now });
  const images = Array.from({ length: 50 }, (_, i) => {
    const repo = `registry.example.com/team-${i % 7}/service-${i}`;
    return { names: [`${repo}@sha256:${digest(`${name}${i}`)}`, `${repo}:v1.${i}.${index % 10}`], sizeBytes: 10_000_000 + i * 1_234_567 };
  });
  return {
    node: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name,
        labels: {
          'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'kubernetes.io/hostname': name,
          'beta.kubernetes.io/os': 'linux', 'beta.kubernetes.io/arch': 'amd64',
          'node.kubernetes.io/instance-type': 'm6i.2xlarge', 'topology.kubernetes.io/region': 'region-1', 'topology.kubernetes.io/zone': zone,
        },
        annotations: { 'node.alpha.kubernetes.io/ttl': '0', 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' },
      },
      spec: { podCIDR: '10.244.0.0/24', providerID: `example://${zone}/${digest(name).slice(0, 17)}` },
    },
    status: {
      capacity: { cpu: '8', memory: '32386524Ki', pods: '110', 'ephemeral-storage': '101430960Ki', 'hugepages-1Gi': '0', 'hugepages-2Mi': '0' },
      allocatable: { cpu: '7910m', memory: '31369692Ki', pods: '110', 'ephemeral-storage': '93478772582', 'hugepages-1Gi': '0', 'hugepages-2Mi': '0' },
      conditions: [
        condition('MemoryPressure', 'False', 'KubeletHasSufficientMemory', 'kubelet has sufficient memory available'),
        condition('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure'),
        condition('PIDPressure', 'False', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available'),
        condition('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status. AppArmor enabled'),
      ],
      // TEST-NET addresses: nothing dials them.
      addresses: [{ type: 'InternalIP', address: `192.0.2.${index % 250}` }, { type: 'Hostname', address: name }],
      daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
      nodeInfo: {
        machineID: digest(`m${name}`).slice(0, 32), systemUUID: digest(`u${name}`).slice(0, 36), bootID: digest(`b${name}`).slice(0, 36),
        kernelVersion: '6.1.0-27-cloud-amd64', osImage: 'Debian GNU/Linux 12 (bookworm)', containerRuntimeVersion: 'containerd://1.7.24',
        kubeletVersion: 'v1.20.2', kubeProxyVersion: 'v1.20.2', operatingSystem: 'linux', architecture: 'amd64',
      },
      images,
    },
  };
}

module.exports = { realisticNode };
