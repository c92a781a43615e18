// clawctx Node loader hook: resolves the OpenClaw plugin SDK module names
// ("openclaw/plugin-sdk/core", "openclaw/plugin-sdk/plugin-entry", ...) to clawctx's own
// implementations, so plugins written against OpenClaw run unchanged. Registered by
// runner.mjs with module.register(); the map arrives through initialize().
let map = {};

export async function initialize(data) {
  map = (data && data.map) || {};
}

export async function resolve(specifier, context, nextResolve) {
  if (Object.prototype.hasOwnProperty.call(map, specifier)) {
    return { url: map[specifier], shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
