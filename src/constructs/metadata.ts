import * as fs from 'fs';
import * as path from 'path';
import { ApiObject, Chart, JsonPatch } from 'cdk8s';
import { ShimToleration, TolerationEffect, TolerationOperator } from './toleration';
import { labelValueProblem, metadataKeyProblem } from '../shared/validation';

/**
 * Checks labels or annotations given to a construct: keys as Kubernetes wants them, label
 * values at most 63 characters of the allowed set.
 */
export function validateMetadata(field: 'labels' | 'annotations' | 'workloadAnnotations', map: { [key: string]: string } | undefined): void {
  for (const [key, value] of Object.entries(map ?? {})) {
    const problem = metadataKeyProblem(key);
    if (problem) throw new Error(`${field}: ${problem}`);
    const valueProblem = field === 'labels' ? labelValueProblem(key, value) : undefined;
    if (valueProblem) throw new Error(`labels: ${valueProblem}`);
  }
}

/**
 * A cluster-scoped object carries no namespace, even in a Chart that has one (cdk8s gives
 * every object its Chart's namespace; the API server ignores it, but Argo CD diffs show it).
 */
export function clusterScoped(object: ApiObject): void {
  if (Chart.of(object).namespace !== undefined) object.addJsonPatch(JsonPatch.remove('/metadata/namespace'));
}

const TOLERATION_OPERATORS: string[] = Object.values(TolerationOperator);
const TOLERATION_EFFECTS: string[] = Object.values(TolerationEffect);

/** Checks tolerations (of a Shim, or of the controller pods) against what Kubernetes accepts. */
export function validateTolerations(field: string, tolerations: ShimToleration[]): void {
  tolerations.forEach((t, i) => {
    if (t.operator !== undefined && !TOLERATION_OPERATORS.includes(t.operator)) {
      throw new Error(`${field}[${i}].operator: "${t.operator}" is not one of ${TOLERATION_OPERATORS.join(', ')}`);
    }
    if (t.effect !== undefined && !TOLERATION_EFFECTS.includes(t.effect)) {
      throw new Error(`${field}[${i}].effect: "${t.effect}" is not one of ${TOLERATION_EFFECTS.join(', ')}`);
    }
    if (t.operator === 'Exists' && t.value) throw new Error(`${field}[${i}].value: must be empty with operator Exists`);
    if (t.key === undefined && t.operator !== 'Exists') throw new Error(`${field}[${i}].key: an empty key needs operator Exists`);
    if (t.tolerationSeconds !== undefined) {
      if (t.effect !== TolerationEffect.NO_EXECUTE) {
        throw new Error(`${field}[${i}].tolerationSeconds: only applies to effect NoExecute, got effect ${t.effect ?? '(every effect)'}`);
      }
      if (!Number.isInteger(t.tolerationSeconds)) throw new Error(`${field}[${i}].tolerationSeconds: must be a whole number, got ${t.tolerationSeconds}`);
    }
  });
}

/** A file shipped in the package, found upwards from here (src/constructs or lib/src/constructs). */
export function findUp(file: string): string {
  let dir = __dirname;
  for (;;) {
    const candidate = path.join(dir, file);
    if (fs.existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`cannot find ${file} above ${__dirname}`);
    dir = parent;
  }
}
