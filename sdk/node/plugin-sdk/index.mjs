// "openclaw/plugin-sdk": everything clawctx implements, in one module.
export * from './core.mjs';
