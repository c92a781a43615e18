// clawctx implementation of "openclaw/plugin-sdk/plugin-entry": definePluginEntry({...}).
'use strict';

/**
 * Declares a plugin entry: `{ id?, name?, description?, configSchema?, register(api) }`.
 * The runner calls `register(api)`.
 */
function definePluginEntry(entry) {
  if (!entry || typeof entry !== 'object' || typeof entry.register !== 'function') {
    throw new TypeError('definePluginEntry() needs an object with a register(api) function');
  }
  return entry;
}

// OpenClaw's plugin-entry module re-exports this helper too; plugins import it from either.
const { emptyPluginConfigSchema } = require('./core.cjs');

module.exports = { definePluginEntry, emptyPluginConfigSchema };
