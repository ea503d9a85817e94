// A request as the controller admits it in a node record (install mode NodeAgent), for tests
// that run the node agent's own code against a Node stand-in.
import { AdmittedRequest } from '../../src/shared/agent-protocol';

/** The first attempt of an install of `handler` for Shim `shim`, from the artifact at `artifact`. */
export function installRequest(shim: string, handler: string, artifact: { url: string; sha256: string }): AdmittedRequest {
  return {
    name: `${shim}-install-1`,
    shimUid: 'uid-1',
    operation: 'install',
    handler,
    revision: 'r1',
    attempt: 1,
    batch: 'b1',
    createdAt: new Date().toISOString(),
    request: { command: 'install', handler, location: artifact.url, sha256: artifact.sha256 } as AdmittedRequest['request'],
  };
}
