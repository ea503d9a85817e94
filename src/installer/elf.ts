// Is this file a program the node can run? containerd starts the shim with exec: a shell
// script named like a shim, or a binary built for another architecture, would be installed
// and registered, and then fail every pod with an exec format error. The ELF header says
// enough to refuse them before the host is touched.
import * as fs from 'fs';

/** What the ELF header must say for each node architecture (GOARCH names, as in OS/ARCH). */
const MACHINES: Record<string, { machine: number; name: string; bits: 32 | 64; littleEndian: boolean }> = {
  amd64: { machine: 62, name: 'x86-64', bits: 64, littleEndian: true },
  arm64: { machine: 183, name: 'aarch64', bits: 64, littleEndian: true },
  arm: { machine: 40, name: 'arm', bits: 32, littleEndian: true },
  ppc64le: { machine: 21, name: 'ppc64', bits: 64, littleEndian: true },
  s390x: { machine: 22, name: 's390', bits: 64, littleEndian: false },
  riscv64: { machine: 243, name: 'riscv', bits: 64, littleEndian: true },
  386: { machine: 3, name: 'i386', bits: 32, littleEndian: true },
};
const NAMES = new Map(Object.values(MACHINES).map(m => [m.machine, m.name]));

/** The first 20 bytes of a file (what the checks below read). */
export function elfHeadOf(file: string): Buffer {
  const fd = fs.openSync(file, 'r');
  try {
    const head = Buffer.alloc(20);
    const read = fs.readSync(fd, head, 0, head.length, 0);
    return head.subarray(0, read);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Why a file starting with `head` cannot run on a node of `platform` (OS/ARCH), or undefined
 * when its ELF header fits: Linux, the architecture's machine, word size and byte order.
 */
export function elfProblem(head: Buffer, platform: string): string | undefined {
  if (head.length < 20 || head.readUInt32BE(0) !== 0x7f454c46) {
    const start = head.subarray(0, 2).toString('latin1');
    return `it is not an ELF program${start === '#!' ? ' (it is a script)' : ''}`;
  }
  const [os, arch] = platform.split('/');
  if (os !== 'linux') return `the node's platform ${platform} is not Linux`;
  const expected = MACHINES[arch];
  if (!expected) return `the node's architecture ${arch} is unknown to this installer`;
  const bits = head[4] === 1 ? 32 : head[4] === 2 ? 64 : undefined;
  const littleEndian = head[5] === 1 ? true : head[5] === 2 ? false : undefined;
  if (bits === undefined || littleEndian === undefined) return 'its ELF header is damaged';
  const machine = littleEndian ? head.readUInt16LE(18) : head.readUInt16BE(18);
  if (machine !== expected.machine) {
    return `it is built for ${NAMES.get(machine) ?? `ELF machine ${machine}`}, the node is ${platform} (${expected.name})`;
  }
  if (bits !== expected.bits || littleEndian !== expected.littleEndian) {
    return `it is a ${bits}-bit ${littleEndian ? 'little' : 'big'}-endian ${expected.name} program, the node is ${platform}`;
  }
  return undefined;
}
