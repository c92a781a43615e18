// ESM face of plugin-entry.cjs ("openclaw/plugin-sdk/plugin-entry").
import entry from './plugin-entry.cjs';

export const definePluginEntry = entry.definePluginEntry;
export const emptyPluginConfigSchema = entry.emptyPluginConfigSchema;
export const buildJsonPluginConfigSchema = entry.buildJsonPluginConfigSchema;
export const buildPluginConfigSchema = entry.buildPluginConfigSchema;
export default entry;
