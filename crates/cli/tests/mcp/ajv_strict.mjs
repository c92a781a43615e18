// Compiles every MCP tool's input schema with Ajv (https://ajv.js.org), the validator of the
// TypeScript MCP SDK, in its strict mode: twice, with Ajv's defaults (strict mode is on by
// default) and with `strict: true` (every strict check an error; union types allowed, as
// `Option<T>` is `["integer", "null"]`). A schema that uses a keyword or a `format` no draft
// defines does not compile.
//
// Run by crates/cli/tests/mcp.rs:  node ajv_strict.mjs AJV_DIR SCHEMAS.json
// AJV_DIR holds node_modules/ajv (the test installs it there); SCHEMAS.json maps tool names to
// input schemas. Prints one JSON line; exits 1 when a schema does not compile.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [ajvDir, file] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(ajvDir), "package.json"));
const Ajv = require("ajv").default;
const Ajv2020 = require("ajv/dist/2020").default;

const tools = JSON.parse(readFileSync(file, "utf8"));
const failures = [];
let compiled = 0;
for (const [name, schema] of Object.entries(tools)) {
  const draft2020 = String(schema.$schema ?? "").includes("2020-12");
  for (const [label, options] of [
    ["defaults", {}],
    ["strict: true", { strict: true, allowUnionTypes: true }],
  ]) {
    const ajv = draft2020 ? new Ajv2020(options) : new Ajv(options);
    try {
      ajv.compile(schema);
      compiled += 1;
    } catch (e) {
      failures.push(`${name} (${label}): ${e.message}`);
    }
  }
}
console.log(JSON.stringify({ ok: failures.length === 0, tools: Object.keys(tools).length, compiled, failures }));
process.exit(failures.length ? 1 : 0);
