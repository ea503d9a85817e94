// Install mode NodeAgent: the node agent's pod on a node, for control planes where no kubelet
// runs it (the agent runs as a process, or not at all). The controller finds a node's agent
// by this pod and takes the node as ready for requests while the pod is Ready, as the
// DaemonSet's pod would be once its kubelet started it.
import { Rest } from './rest';
import { AGENT_POD_LABELS } from '../../src/shared/agent-protocol';

/** Creates the agent pod bound to `node` and reports it Running and Ready (or not), as its kubelet would. */
export async function createAgentPod(rest: Rest, namespace: string, node: string, ready = true): Promise<string> {
  const name = `rcm-node-agent-${node}`;
  const image = 'ghcr.io/spinkube/rcm-node-installer:test';
  await rest.request('POST', `/api/v1/namespaces/${namespace}/pods`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { ...AGENT_POD_LABELS } },
    spec: {
      nodeName: node,
      // No token controller may run here: the pod mounts none (the agent process has its own kubeconfig).
      automountServiceAccountToken: false,
      hostNetwork: true,
      hostPID: true,
      containers: [{ name: 'agent', image }],
    },
  });
  await setAgentPodReady(rest, namespace, node, ready);
  return name;
}

/** The agent pod's readiness, as its kubelet (or the node lifecycle controller, for a node gone silent) reports it. */
export async function setAgentPodReady(rest: Rest, namespace: string, node: string, ready: boolean): Promise<void> {
  const now = new Date().toISOString();
  const status = ready ? 'True' : 'False';
  await rest.request('PATCH', `/api/v1/namespaces/${namespace}/pods/rcm-node-agent-${node}/status`, {
    status: {
      phase: 'Running',
      startTime: now,
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: now },
        { type: 'Initialized', status: 'True', lastTransitionTime: now },
        { type: 'ContainersReady', status, lastTransitionTime: now },
        { type: 'Ready', status, lastTransitionTime: now },
      ],
      containerStatuses: [{ name: 'agent', image: 'ghcr.io/spinkube/rcm-node-installer:test', imageID: '', ready, started: true, restartCount: 0, state: { running: { startedAt: now } } }],
    },
  }, 'application/merge-patch+json');
}
