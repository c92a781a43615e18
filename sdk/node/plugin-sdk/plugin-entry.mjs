// ESM face of plugin-entry.cjs ("openclaw/plugin-sdk/plugin-entry").
import entry from './plugin-entry.cjs';

export const definePluginEntry = entry.definePluginEntry;
export default entry;
