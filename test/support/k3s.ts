// How k3s (and rke2, which runs k3s's agent) turns its containerd template into the config
// containerd reads, at every start: the template of its containerd's major version
// (config.toml.tmpl for 1.x, config-v3.toml.tmpl for 2.x), with k3s's own base config put
// where the template says {{ template "base" . }}; without a template, the base alone.

/**
 * A shell command that renders `<etcDir>/config.toml` from `<etcDir>/<template>` and the base
 * config in the file `base`, as k3s does before it starts containerd (through a rename: readers never see half a file).
 */
export function renderK3sConfig(etcDir: string, template: string, base: string): string {
  return `if [ -f ${etcDir}/${template} ]; then
  sed -e '/{{ template "base" . }}/{' -e "r ${base}" -e 'd' -e '}' ${etcDir}/${template} > ${etcDir}/config.toml.rendering
else
  cp ${base} ${etcDir}/config.toml.rendering
fi
mv ${etcDir}/config.toml.rendering ${etcDir}/config.toml`;
}
