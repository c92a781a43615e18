//! Start-up of a large TypeScript plugin, its compiled output cached or not (issue #39 item 4).
//!
//! jiti compiles a TypeScript entry and everything it imports when the plugin starts; before
//! the cache every start paid that (`fsCache: false`). The plugin here is generated: an entry
//! importing `MODULES` modules of typed code (interfaces, enums, generic classes, parameter
//! properties), about 1.1 MB of TypeScript, the size of a large published plugin. Each round
//! starts it twice through the real host (spawn, handshake, `initialize`, the engine's factory),
//! alternating: *cold*, with its cache directory removed first (what every start cost before),
//! and *warm*, from the cache the previous start left. Prints p50 and max of each.
//!
//! Run: `cargo bench -p clawctx-plugin --bench ts_startup`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::*;
use clawctx_plugin::{register_plugin, PluginOptions};
use serde_json::json;

const MODULES: usize = 60;
const ROUNDS: usize = 8;

/// One generated module: `n`'s types and a class using them.
fn module(n: usize) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "export enum Kind{n} {{ A = \"a{n}\", B = \"b{n}\", C = \"c{n}\" }}"
    )
    .unwrap();
    for i in 0..40 {
        writeln!(
            s,
            "export interface Record{n}_{i}<T> {{ id: string; kind: Kind{n}; value: T; tags: readonly string[]; at?: number }}"
        )
        .unwrap();
        writeln!(
            s,
            "export class Store{n}_{i}<T extends {{ toString(): string }}> {{\n  private readonly items = new Map<string, Record{n}_{i}<T>>();\n  constructor(private readonly prefix: string, protected limit: number = {i} + 1) {{}}\n  put(value: T, kind: Kind{n} = Kind{n}.A): Record{n}_{i}<T> {{\n    const id = `${{this.prefix}}-${{this.items.size}}-${{value.toString()}}`;\n    const rec: Record{n}_{i}<T> = {{ id, kind, value, tags: [kind, String(this.limit)] }};\n    this.items.set(id, rec);\n    if (this.items.size > this.limit) {{ const first = this.items.keys().next().value as string; this.items.delete(first); }}\n    return rec;\n  }}\n  get size(): number {{ return this.items.size; }}\n}}"
        )
        .unwrap();
    }
    writeln!(
        s,
        "export const count{n}: number = new Store{n}_0<number>(\"m{n}\").put({n}).tags.length;"
    )
    .unwrap();
    s
}

fn write_plugin(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("openclaw.plugin.json"),
        json!({"id": "ts-big", "kind": "context-engine", "configSchema": {"type": "object"}})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("package.json"),
        json!({"type": "module", "openclaw": {"extensions": ["./src/index.ts"]}}).to_string(),
    )
    .unwrap();
    let mut entry = String::new();
    let mut sum = String::from("0");
    for n in 0..MODULES {
        std::fs::write(dir.join(format!("src/m{n}.ts")), module(n)).unwrap();
        writeln!(entry, "import {{ count{n} }} from \"./m{n}\";").unwrap();
        write!(sum, " + count{n}").unwrap();
    }
    write!(
        entry,
        "const total: number = {sum};\n\
         export default function register(api: {{ registerContextEngine(id: string, f: () => unknown): void }}): void {{\n\
           api.registerContextEngine(\"ts-big\", () => ({{\n\
             info: {{ id: \"ts-big\", name: `ts-big ${{total}}`, ownsCompaction: false }},\n\
             async ingest() {{ return {{ ingested: false }}; }},\n\
             async assemble(p: {{ messages: unknown[] }}) {{ return {{ messages: p.messages, estimatedTokens: 0 }}; }},\n\
             async compact() {{ return {{ ok: true, compacted: false }}; }},\n\
           }}));\n\
         }}\n"
    )
    .unwrap();
    std::fs::write(dir.join("src/index.ts"), entry).unwrap();
}

async fn start(dir: &Path, opts: &PluginOptions) -> Duration {
    let config = json!({"plugins": {"slots": {"contextEngine": "ts-big"}}});
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let t = Instant::now();
    let loaded = register_plugin(&registry, dir, &config, opts.clone())
        .await
        .expect("plugin loads");
    let resolved = registry
        .resolve(Some(Arc::new(config.clone())), None, None)
        .await
        .expect("resolve");
    let took = t.elapsed();
    assert_eq!(resolved.effective_id, "ts-big");
    loaded.host.shutdown().await;
    took
}

fn p(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plugin = tmp.path().join("ts-big");
        write_plugin(&plugin);
        let bytes: u64 = std::fs::read_dir(plugin.join("src"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let runtime = tmp.path().join("runtime");
        let opts = PluginOptions {
            runtime_dir: Some(runtime.clone()),
            init_timeout: Some(Duration::from_secs(120)),
            ..Default::default()
        };
        let cache = runtime.join("jiti-cache").join("ts-big");
        // Warm-up: the runner and jiti written, Node's own caches.
        start(&plugin, &opts).await;
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let _ = std::fs::remove_dir_all(&cache);
            cold.push(start(&plugin, &opts).await);
            warm.push(start(&plugin, &opts).await);
        }
        println!(
            "TypeScript plugin, {MODULES} modules, {} KB of source",
            bytes / 1024
        );
        println!(
            "start-up, compiled by jiti (no cache: every start before):  p50 {:?}  max {:?}",
            p(&mut cold, 0.5),
            p(&mut cold, 1.0)
        );
        println!(
            "start-up, from jiti's cache:                                   p50 {:?}  max {:?}",
            p(&mut warm, 0.5),
            p(&mut warm, 1.0)
        );
    });
}
