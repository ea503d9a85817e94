import * as fs from 'fs';
import * as path from 'path';
import { ApiObject, Yaml } from 'cdk8s';
import { Construct } from 'constructs';

/** The CRD file, relative to the package root; shipped in the npm package. */
const CRD_FILE = path.join('crds', 'shims.runtime.spinkube.dev.yaml');

/**
 * The Shim CustomResourceDefinition, emitted exactly as the repository's CRD file says.
 */
export class ShimDefinition extends Construct {
  /** Path of the CRD YAML that this construct emits. */
  public static get file(): string {
    // Sources run from src/constructs and the compiled library from lib/src/constructs:
    // look upwards instead of assuming a depth.
    let dir = __dirname;
    for (;;) {
      const candidate = path.join(dir, CRD_FILE);
      if (fs.existsSync(candidate)) return candidate;
      const parent = path.dirname(dir);
      if (parent === dir) throw new Error(`cannot find ${CRD_FILE} above ${__dirname}`);
      dir = parent;
    }
  }

  /** The CustomResourceDefinition object. */
  public readonly resource: ApiObject;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    const [crd] = Yaml.load(ShimDefinition.file);
    // An ApiObject: the CRD exactly as its file says, and cdk8s-plus has no CustomResourceDefinition construct.
    this.resource = new ApiObject(this, 'Resource', crd);
  }
}
