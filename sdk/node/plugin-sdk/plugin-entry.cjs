// clawctx implementation of "openclaw/plugin-sdk/plugin-entry": definePluginEntry({...}).
'use strict';

/**
 * Declares a plugin entry, as OpenClaw's does: a plain object with `id`, `name`,
 * `description`, `kind`, `reload`, `nodeHostCommands` and `securityAuditCollectors` when
 * given, `configSchema` (a lazy, cached getter: a function is called once, on first read;
 * the empty schema when absent) and `register`. Other keys are dropped, as OpenClaw drops
 * them. It does not check `register`: an entry without one fails to load with OpenClaw's
 * `plugin export missing register/activate`, naming the entry.
 */
function definePluginEntry(options) {
  const {
    id,
    name,
    description,
    kind,
    configSchema,
    reload,
    nodeHostCommands,
    securityAuditCollectors,
    register,
  } = options || {};
  let schema;
  let resolved = false;
  const entry = { id, name, description };
  if (kind) entry.kind = kind;
  if (reload) entry.reload = reload;
  if (nodeHostCommands) entry.nodeHostCommands = nodeHostCommands;
  if (securityAuditCollectors) entry.securityAuditCollectors = securityAuditCollectors;
  Object.defineProperty(entry, 'configSchema', {
    enumerable: true,
    get() {
      if (!resolved) {
        const source = configSchema === undefined ? require('./core.cjs').emptyPluginConfigSchema : configSchema;
        schema = typeof source === 'function' ? source() : source;
        resolved = true;
      }
      return schema;
    },
  });
  entry.register = register;
  return entry;
}

// OpenClaw's plugin-entry module re-exports this helper too; plugins import it from either.
const { emptyPluginConfigSchema } = require('./core.cjs');

module.exports = { definePluginEntry, emptyPluginConfigSchema };

// And the config schema builders.
module.exports.buildJsonPluginConfigSchema = require('./core.cjs').buildJsonPluginConfigSchema;
module.exports.buildPluginConfigSchema = require('./core.cjs').buildPluginConfigSchema;
