export * from './shared/node-labels';
export * from './constructs/rollout';
export * from './constructs/runtime-payload';
export * from './constructs/shim';
export * from './constructs/shim-definition';
export * from './constructs/runtime-class-manager';
