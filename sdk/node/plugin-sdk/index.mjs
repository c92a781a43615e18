// "openclaw/plugin-sdk": everything clawctx implements, in one module.
export * from './core.mjs';
export { definePluginEntry } from './plugin-entry.mjs';
