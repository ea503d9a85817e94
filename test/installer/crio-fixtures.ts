// Real `crio --version` outputs, copied from public bug reports (each names its source), and
// the handler fields of CRI-O's crio.conf(5). The tests judge our files and decisions by
// these; 1.34.0's was produced on this project's machines (the multi-node suite's CRI-O), the
// others were not.

/** `crio --version` as released CRI-O binaries print it. */
export const CRIO_VERSION_OUTPUTS = {
  /** kata-containers/tests#2995 (2020): before 1.26, changes need a restart. */
  '1.18.3': `crio version 1.18.3
Version:       1.18.3
GitCommit:     61de18161fb4ccda720768c001713592b5a04e46
GitTreeState:  clean
BuildDate:     2020-10-20T19:47:53Z
GoVersion:     go1.14.4
Compiler:      gc
Platform:      linux/amd64
Linkmode:      dynamic
`,
  /** cri-o/cri-o#3845 (2020, a build from the release tarball): an empty version on the first line. */
  '1.18.1': `crio version 
Version:    1.18.1
GoVersion:  go1.13.8
Compiler:   gc
Platform:   linux/amd64
`,
  /** cri-o/cri-o#3845: the one-line output of 1.17. */
  '1.17.1': `crio version 1.17.1
`,
  /** kata-containers/kata-containers#4164 (2022). */
  '1.23.2': `crio version 1.23.2
Version:          1.23.2
GitCommit:        9a36bb83172c02ebd060586086abd6c160e8a550
GitTreeState:     clean
BuildDate:        2022-04-22T03:48:15Z
GoVersion:        go1.17.3
Compiler:         gc
Platform:         linux/amd64
Linkmode:         dynamic
BuildTags:        exclude_graphdriver_devicemapper, seccomp, selinux
SeccompEnabled:   true
AppArmorEnabled:  false
`,
  /** kata-containers/kata-containers#11281 (2025): 1.26 and later reload the runtimes table on SIGHUP. */
  '1.29.1': `crio version 1.29.1
Version:        1.29.1
GitCommit:      unknown
GitCommitDate:  unknown
GitTreeState:   clean
BuildDate:      2025-01-14T08:57:58Z
GoVersion:      go1.21.6
Compiler:       gc
Platform:       linux/amd64
Linkmode:       dynamic
BuildTags:      
  containers_image_ostree_stub
  exclude_graphdriver_btrfs
  btrfs_noversion
  exclude_graphdriver_devicemapper
  libdm_no_deferred_remove
  seccomp
LDFlags:          unknown
SeccompEnabled:   true
AppArmorEnabled:  false
`,
  /**
   * A real CRI-O 1.34.0, built from the Go module proxy by scripts/stack/build-crio.sh (the
   * multi-node suite's CRI-O node): no `Version:` line, the others indented under the first
   * (cmd/crio/main.go of v1.34.0 lays them out so). GitCommit is unknown for want of CRI-O's
   * Makefile flags; a released binary prints its commit on that line.
   */
  '1.34.0': `crio version 1.34.0
   GitCommit:      unknown
   GitCommitDate:  unknown
   GitTreeState:   clean
   GoVersion:      go1.26.8
   Compiler:       gc
   Platform:       linux/amd64
   Linkmode:       dynamic
   BuildTags:
     containers_image_openpgp
     exclude_graphdriver_btrfs
     exclude_graphdriver_devicemapper
     seccomp
   LDFlags:          unknown
   SeccompEnabled:   true
   AppArmorEnabled:  false
`,
  /**
   * MADE UP, not a release's output: 1.29.1's lines with another version and commit, for a
   * CRI-O after 1.36 (which no longer requires a `vm` shim's name to end in -v2, issue 23).
   */
  '1.37.0': `crio version 1.37.0
Version:        1.37.0
GitCommit:      0000000000000000000000000000000000000000
GitCommitDate:  unknown
GitTreeState:   clean
BuildDate:      2026-01-01T00:00:00Z
GoVersion:      go1.24.0
Compiler:       gc
Platform:       linux/amd64
Linkmode:       dynamic
`,
};

/**
 * The fields of `[crio.runtime.runtimes.<handler>]` and their types, as crio.conf(5)
 * documents them: cri-o/cri-o docs/crio.conf.5.md (commit f40da54704c5c32fb24b2b0e204424afae5b0dc2),
 * section "CRIO.RUNTIME.RUNTIMES TABLE":
 *   runtime_path="" (path), runtime_root="" (path), runtime_type="oci" ("oci", "vm"),
 *   runtime_config_path="" ("should only be used with VM runtime types"),
 *   privileged_without_host_devices=false, allowed_annotations=[] (strings),
 *   platform_runtime_paths={} (platform → path).
 * Newer CRI-O documents more (monitor_path and friends, for `oci` only); the installer writes
 * none of those.
 */
export const CRIO_CONF_5_HANDLER_FIELDS: Record<string, 'string' | 'boolean' | 'string[]' | 'table'> = {
  runtime_path: 'string',
  runtime_root: 'string',
  runtime_type: 'string',
  runtime_config_path: 'string',
  privileged_without_host_devices: 'boolean',
  allowed_annotations: 'string[]',
  platform_runtime_paths: 'table',
};

/** Checks a parsed handler table against crio.conf(5)'s fields; returns the problems. */
export function crioConf5Problems(table: Record<string, unknown>): string[] {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(table)) {
    const type = CRIO_CONF_5_HANDLER_FIELDS[key];
    if (!type) {
      problems.push(`${key}: not in crio.conf(5)`);
      continue;
    }
    const ok = type === 'string[]' ? Array.isArray(value) && value.every(v => typeof v === 'string')
      : type === 'table' ? !!value && typeof value === 'object' && !Array.isArray(value) : typeof value === type;
    if (!ok) problems.push(`${key}: not a ${type}`);
  }
  if (!['oci', 'vm'].includes(table.runtime_type as string)) problems.push(`runtime_type: ${JSON.stringify(table.runtime_type)} is not "oci" or "vm"`);
  if (table.runtime_config_path !== undefined && table.runtime_type !== 'vm') problems.push('runtime_config_path: only with runtime_type "vm"');
  return problems;
}
