export * from './shared/node-labels';
export * from './constructs/argo-cd';
export * from './constructs/rollout';
export * from './constructs/runtime-payload';
export * from './constructs/toleration';
export * from './constructs/shim';
export * from './constructs/shim-definition';
export * from './constructs/runtime-class-manager';
