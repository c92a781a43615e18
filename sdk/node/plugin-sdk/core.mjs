// ESM face of core.cjs ("openclaw/plugin-sdk/core").
import core from './core.cjs';

export const MARKER_KEY = core.MARKER_KEY;
export const buildMemorySystemPromptAddition = core.buildMemorySystemPromptAddition;
export const prepareMemorySystemPromptAddition = core.prepareMemorySystemPromptAddition;
export const delegateCompactionToRuntime = core.delegateCompactionToRuntime;
export const emptyPluginConfigSchema = core.emptyPluginConfigSchema;
export const buildJsonPluginConfigSchema = core.buildJsonPluginConfigSchema;
export const buildPluginConfigSchema = core.buildPluginConfigSchema;
export const definePluginEntry = core.definePluginEntry;
export default core;
