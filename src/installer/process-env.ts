// What the installer's process takes from where it runs, for the installer and the node agent
// (the installer as a long-running process) alike.

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };

/** This machine's platform as nodes label it (OS/ARCH): the default of --platform. */
export function thisPlatform(): string {
  return `${process.platform}/${ARCH[process.arch] ?? process.arch}`;
}

/**
 * The image points Node.js at the bundle's compile cache (read once, at start-up). Host
 * commands must not inherit that: a Node.js program run on the host would write a cache there.
 */
export function forgetCompileCache(): void {
  delete process.env.NODE_COMPILE_CACHE;
  delete process.env.NODE_COMPILE_CACHE_PORTABLE;
}
