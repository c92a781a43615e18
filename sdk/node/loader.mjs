// clawctx Node loader hook: resolves the OpenClaw plugin SDK module names
// ("openclaw/plugin-sdk/core", "openclaw/plugin-sdk/plugin-entry", ...) to clawctx's own
// implementations, so plugins written against OpenClaw run unchanged. Registered by
// runner.mjs with module.register(); the map arrives through initialize(). An SDK module
// clawctx does not provide resolves to the plugin's own `openclaw` package if it has one;
// otherwise the error names the module (Node's own names only the package), so the runner
// can tell the operator which SDK module the plugin needs.
import { fileURLToPath } from 'node:url';

let map = {};

export async function initialize(data) {
  map = (data && data.map) || {};
}

function isSdkSpecifier(spec) {
  return /^(?:openclaw|clawctx)\/plugin-sdk(?:\/|$)/.test(spec);
}

export async function resolve(specifier, context, nextResolve) {
  if (Object.prototype.hasOwnProperty.call(map, specifier)) {
    return { url: map[specifier], shortCircuit: true };
  }
  if (!isSdkSpecifier(specifier)) return nextResolve(specifier, context);
  try {
    return await nextResolve(specifier, context);
  } catch {
    const parent = context.parentURL;
    const from = parent && parent.startsWith('file:') ? fileURLToPath(parent) : parent;
    const err = new Error(`Cannot find module '${specifier}' imported from ${from} (clawctx does not provide this OpenClaw SDK module)`);
    err.code = 'ERR_MODULE_NOT_FOUND';
    throw err;
  }
}
