//! Out-of-process context engines.
//!
//! A plugin is a directory with a manifest ([`manifest`]) that is installed or linked into
//! the state directory ([`install`]) and runs in its own child process ([`process`]), spoken to
//! over JSON-RPC 2.0, one message per line on stdio ([`rpc`], specified in
//! `docs/plugin-protocol.md`). The supervisor ([`host`]) restarts it after a crash; the
//! adapter ([`adapter`]) makes each engine instance in the process look like an in-process
//! [`clawctx_engine::ContextEngine`], checking every result before use so that a misbehaving
//! plugin is quarantined by the registry's guard and the agent keeps answering on `legacy`.
//! [`register_plugin`] ties it together. Node and Python plugins run under runners embedded in
//! this crate ([`sdk`]); Rust plugins use `clawctx-plugin-sdk`.
//!
//! This crate knows nothing of engine internals: it only speaks the trait.

pub mod adapter;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod hooks;
pub mod host;
pub mod install;
pub mod load_error;
pub mod manifest;
pub mod message_refs;
pub mod process;
pub mod register;
pub mod rpc;
pub mod sdk;

pub use adapter::{check_assembled, PluginEngine, PluginTool};
pub use error::PluginError;
pub use hooks::PluginHooks;
pub use host::{HostOptions, PluginHost};
pub use install::{
    apply_changes, engine_to_select, info, install, install_with, is_slot_change, list,
    plugin_dirs, select_engine_change, uninstall, ConfigChange, InstallOptions, InstallRecord,
    InstallReport, InstallSource, UninstallReport,
};
pub use load_error::{LoadError, LoadErrorKind};
pub use manifest::{load_manifest, PluginEntry, PluginManifest};
pub use register::{load_plugins, register_plugin, LoadedPlugin, PluginOptions};
pub use rpc::{EngineDecl, HookDecl, InitializeResult, ToolDecl, PROTOCOL_VERSION};
