// ESM face of core.cjs ("openclaw/plugin-sdk/core").
import core from './core.cjs';

export const MARKER_KEY = core.MARKER_KEY;
export const buildMemorySystemPromptAddition = core.buildMemorySystemPromptAddition;
export const prepareMemorySystemPromptAddition = core.prepareMemorySystemPromptAddition;
export const delegateCompactionToRuntime = core.delegateCompactionToRuntime;
export const emptyPluginConfigSchema = core.emptyPluginConfigSchema;
export default core;
