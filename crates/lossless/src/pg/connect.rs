//! The PostgreSQL database's address, its TLS settings and the connection pool.
//!
//! A [`PgTarget`] is parsed from a connection string (`postgres://` / `postgresql://` URL, or
//! libpq's `key=value` form) and is only ever shown redacted: user, hosts, ports and database,
//! never the password (`Display` and `Debug` both redact). [`connect_pool`] checks out one
//! connection at once, so a database that is down, refuses the login or does not exist fails
//! at start with [`LosslessError::Unreachable`] rather than on the first turn.
//!
//! TLS follows libpq's `sslmode` (the driver itself knows only `disable`/`prefer`/`require`,
//! so [`PgTarget::parse`] takes `sslmode` and `sslrootcert` out of the string first):
//! `disable` never encrypts; `prefer` (the default, as in libpq) encrypts when the server
//! offers it; `require` always encrypts; neither checks the certificate (libpq's meaning:
//! they protect against a passive listener, not an impostor), except that `require` with an
//! `sslrootcert` checks the chain as `verify-ca` does; `verify-ca` checks the server's chain
//! against the roots; `verify-full` also checks that the certificate names the host connected
//! to. Both accept what libpq (OpenSSL) accepts and webpki alone would not: a self-signed
//! certificate that is itself the root, an X.509 v1 server certificate, a host named only by
//! the Common Name ([`super::libpq_tls`]). The roots are the `sslrootcert` file (PEM) or,
//! without it or with `sslrootcert=system`, the operating system's store. TLS is rustls with
//! ring.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::libpq_tls::LibpqVerifier;
use crate::error::{LosslessError, Result};

/// PostgreSQL's default port.
const DEFAULT_PORT: u16 = 5432;

/// How long one connection attempt may take when the connection string sets no
/// `connect_timeout` (a black-holed host fails at start instead of hanging).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a connection is encrypted and what of the server's certificate is checked: libpq's
/// `sslmode` values (see the module's text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, plaintext otherwise; the certificate is not checked.
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` is given:
    /// then its chain is, as with `verify-ca`).
    Require,
    /// TLS, with the server's certificate chain checked against the roots.
    VerifyCa,
    /// TLS, with the chain checked and the certificate naming the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The `sslmode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(LosslessError::InvalidInput(format!(
                    "invalid PostgreSQL connection string: sslmode {other:?} is not one of \
                     disable, prefer, require, verify-ca, verify-full"
                )))
            }
        })
    }
}

/// The roots a verifying `sslmode` checks the server's chain against.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RootCerts {
    /// The operating system's store (no `sslrootcert`, or `sslrootcert=system`).
    System,
    /// A PEM file of CA certificates (`sslrootcert=PATH`).
    File(PathBuf),
}

/// A PostgreSQL database to connect to. Shown (`Display`, `Debug`) without its password.
#[derive(Clone)]
pub struct PgTarget {
    config: tokio_postgres::Config,
    ssl_mode: SslMode,
    root_certs: RootCerts,
}

impl PgTarget {
    /// Parses a connection string: a `postgres://` / `postgresql://` URL or libpq's `key=value`
    /// form, with libpq's `sslmode` (`disable`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert`. The error names what is wrong, never the password.
    pub fn parse(s: &str) -> Result<Self> {
        let (rest, tls_keys) = take_tls_keys(s.trim());
        let mut ssl_mode = SslMode::default();
        let mut root_certs = RootCerts::System;
        for (key, value) in tls_keys {
            match key {
                TlsKey::Mode => ssl_mode = SslMode::parse(&value)?,
                TlsKey::RootCert if value == "system" || value.is_empty() => {
                    root_certs = RootCerts::System
                }
                TlsKey::RootCert => root_certs = RootCerts::File(PathBuf::from(value)),
            }
        }
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
            // The driver's own text is only "invalid connection string"; the cause says what.
            let reason = match std::error::Error::source(&e) {
                Some(cause) => describe_chain(cause),
                None => e.to_string(),
            };
            LosslessError::InvalidInput(format!("invalid PostgreSQL connection string: {reason}"))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(LosslessError::InvalidInput(
                "invalid PostgreSQL connection string: it names no host".to_string(),
            ));
        }
        config.ssl_mode(match ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        Ok(PgTarget {
            config,
            ssl_mode,
            root_certs,
        })
    }

    /// The same server and credentials, database `dbname`.
    pub fn with_dbname(&self, dbname: &str) -> PgTarget {
        let mut target = self.clone();
        target.config.dbname(dbname);
        target
    }

    /// The connection's `sslmode`.
    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    /// The TLS connector of this target's `sslmode`, or `None` for `disable`. Reads the
    /// `sslrootcert` file or the system's roots when the mode checks certificates; an error
    /// names the file or says that the system has none.
    pub(crate) fn tls(&self) -> Result<Option<MakeRustlsConnect>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (self.ssl_mode, &self.root_certs) {
            (SslMode::Disable, _) => return Ok(None),
            (SslMode::Prefer, _) | (SslMode::Require, RootCerts::System) => {
                Arc::new(NoCertificateCheck(provider.clone()))
            }
            (SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull, roots) => {
                let (store, certs) = self.root_store(roots)?;
                Arc::new(LibpqVerifier::new(
                    webpki_verifier(&store, &provider)?,
                    certs,
                    self.ssl_mode == SslMode::VerifyFull,
                    provider.clone(),
                ))
            }
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| LosslessError::Postgres(format!("TLS setup failed: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(MakeRustlsConnect::new(config)))
    }

    /// The roots of a verifying mode, as rustls's store and as the certificates read.
    fn root_store(
        &self,
        roots: &RootCerts,
    ) -> Result<(RootCertStore, Vec<CertificateDer<'static>>)> {
        let mut store = RootCertStore::empty();
        let mut kept = Vec::new();
        match roots {
            RootCerts::File(path) => {
                let shown = path.display();
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| {
                        LosslessError::InvalidInput(format!(
                            "PostgreSQL sslrootcert {shown}: cannot read its certificates: {e}"
                        ))
                    })?;
                if certs.is_empty() {
                    return Err(LosslessError::InvalidInput(format!(
                        "PostgreSQL sslrootcert {shown}: no PEM certificate in it"
                    )));
                }
                for cert in certs {
                    kept.push(cert.clone());
                    store.add(cert).map_err(|e| {
                        LosslessError::InvalidInput(format!(
                            "PostgreSQL sslrootcert {shown}: a certificate is not usable as a root: {e}"
                        ))
                    })?;
                }
            }
            RootCerts::System => {
                let found = rustls_native_certs::load_native_certs();
                kept.extend(found.certs.iter().cloned());
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    return Err(LosslessError::InvalidInput(format!(
                        "PostgreSQL sslmode={} checks the server's certificate, but the system \
                         has no root certificates{}; name a CA file with sslrootcert=PATH",
                        self.ssl_mode.as_str(),
                        found
                            .errors
                            .first()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    )));
                }
            }
        }
        Ok((store, kept))
    }

    /// The parsed configuration (it holds the password: never print it).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The target as a URL without the password, e.g.
    /// `postgres://clawctx@127.0.0.1:5432/db` (a unix socket directory is shown
    /// percent-encoded, as a URL would carry it).
    pub fn redacted(&self) -> String {
        let c = &self.config;
        let mut out = String::from("postgres://");
        if let Some(user) = c.get_user() {
            out.push_str(&percent_encode(user));
            out.push('@');
        }
        let ports = c.get_ports();
        let port_at = |i: usize| {
            ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(DEFAULT_PORT)
        };
        let hosts: Vec<String> = if c.get_hosts().is_empty() {
            c.get_hostaddrs()
                .iter()
                .enumerate()
                .map(|(i, addr)| match addr {
                    std::net::IpAddr::V4(a) => format!("{a}:{}", port_at(i)),
                    std::net::IpAddr::V6(a) => format!("[{a}]:{}", port_at(i)),
                })
                .collect()
        } else {
            c.get_hosts()
                .iter()
                .enumerate()
                .map(|(i, host)| {
                    let name = match host {
                        Host::Tcp(h) if h.contains(':') => format!("[{h}]"),
                        Host::Tcp(h) => percent_encode(h),
                        Host::Unix(path) => percent_encode(&path.to_string_lossy()),
                    };
                    format!("{name}:{}", port_at(i))
                })
                .collect()
        };
        out.push_str(&hosts.join(","));
        if let Some(db) = c.get_dbname() {
            out.push('/');
            out.push_str(&percent_encode(db));
        }
        out
    }

    /// Removes the password from `text`, should it ever appear there (defense in depth: the
    /// driver's and the server's messages do not carry it).
    fn scrub(&self, text: String) -> String {
        match self.config.get_password().map(String::from_utf8_lossy) {
            Some(pw) if !pw.is_empty() && text.contains(pw.as_ref()) => {
                text.replace(pw.as_ref(), "***")
            }
            _ => text,
        }
    }
}

impl FromStr for PgTarget {
    type Err = LosslessError;

    fn from_str(s: &str) -> Result<Self> {
        PgTarget::parse(s)
    }
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PgTarget").field(&self.redacted()).finish()
    }
}

/// Whether `s` is a PostgreSQL URL (`postgres://` or `postgresql://`, any case) rather than a
/// file path. See [`is_postgres_connection_string`] for libpq's `key=value` form too.
pub fn is_postgres_url(s: &str) -> bool {
    let s = s.trim_start();
    ["postgres://", "postgresql://"].iter().any(|scheme| {
        s.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

/// Whether `s` names a PostgreSQL database rather than a SQLite file: a PostgreSQL URL, or
/// libpq's `key=value` form (`host=db.example dbname=lcm`: it starts with a key, letters and
/// underscores, then `=`). A file path never starts that way unless its first component is
/// itself named like `key=…`, which is taken as a connection string (and refused by
/// [`PgTarget::parse`] naming the key when it is not one).
pub fn is_postgres_connection_string(s: &str) -> bool {
    if is_postgres_url(s) {
        return true;
    }
    let s = s.trim_start();
    let key_len = s
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    key_len > 0
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s[key_len..].trim_start().starts_with('=')
}

/// A pool of up to `max_size` connections (at least one) to `target`, encrypted as its
/// `sslmode` says.
///
/// One connection is checked out before returning, so a database that is down, refuses the
/// login or does not exist fails here with [`LosslessError::Unreachable`], naming the target
/// (redacted) and why (`connection refused`, the server's `password authentication failed
/// for user "..."`, a certificate the roots do not trust or that names another host, ...).
pub async fn connect_pool(target: &PgTarget, max_size: usize) -> Result<Pool> {
    let pool = build_pool(target, max_size)?;
    match pool.get().await {
        Ok(_first) => Ok(pool),
        Err(e) => Err(LosslessError::Unreachable {
            target: target.redacted(),
            reason: target.scrub(unreachable_reason(&e)),
        }),
    }
}

/// Whether a failed first connection is an outage that may end by itself (no answer from a
/// server: refused, timed out, unreachable) rather than a refusal that will not (a login or a
/// database the server rejected).
pub(crate) async fn outage_only(target: &PgTarget) -> bool {
    let Ok(pool) = build_pool(target, 1) else {
        return false;
    };
    match pool.get().await {
        Err(deadpool_postgres::PoolError::Backend(e)) => e.as_db_error().is_none(),
        Err(deadpool_postgres::PoolError::Timeout(_)) => true,
        _ => false,
    }
}

/// The pool of [`connect_pool`] without its first connection (nothing is connected yet).
pub(crate) fn build_pool(target: &PgTarget, max_size: usize) -> Result<Pool> {
    let mut config = target.config.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match target.tls()? {
        Some(tls) => Manager::from_config(config, tls, manager_config),
        None => Manager::from_config(config, NoTls, manager_config),
    };
    Pool::builder(manager)
        .max_size(max_size.max(1))
        .build()
        .map_err(|e| {
            LosslessError::Postgres(format!(
                "cannot build the connection pool for {target}: {e}"
            ))
        })
}

/// Why the first connection failed, as short as is still clear: the server's message for a
/// refused login or a missing database, the OS's for a refused or timed-out connection.
fn unreachable_reason(e: &PoolError) -> String {
    match e {
        PoolError::Backend(e) => match e.as_db_error() {
            Some(db) => describe_db_error(db),
            None => match std::error::Error::source(e) {
                Some(cause) => describe_chain(cause),
                None => e.to_string(),
            },
        },
        other => describe_pool_error(other),
    }
}

/// A driver error with its causes (the driver's own text omits them) and, for an error the
/// server reported, its message, SQLSTATE, detail and hint. Never contains the password.
pub(crate) fn describe_pg_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return describe_db_error(db);
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {}", describe_chain(cause)),
        None => e.to_string(),
    }
}

/// A pool error, described like [`describe_pg_error`].
pub(crate) fn describe_pool_error(e: &PoolError) -> String {
    match e {
        PoolError::Backend(e) => describe_pg_error(e),
        PoolError::Timeout(kind) => {
            format!("timed out waiting for a database connection ({kind:?})")
        }
        PoolError::Closed => "the connection pool is closed".to_string(),
        PoolError::NoRuntimeSpecified => {
            "the connection pool has no runtime for its timeouts".to_string()
        }
        PoolError::PostCreateHook(hook) => format!("connection setup failed: {hook}"),
    }
}

/// `message [SQLSTATE code] (detail; hint)` of an error the server reported.
fn describe_db_error(db: &tokio_postgres::error::DbError) -> String {
    let mut text = format!("{} [SQLSTATE {}]", db.message(), db.code().code());
    let extra: Vec<&str> = [db.detail(), db.hint()].into_iter().flatten().collect();
    if !extra.is_empty() {
        text.push_str(&format!(" ({})", extra.join("; ")));
    }
    text
}

/// An error and its causes joined by `: `, with I/O errors in plain words.
fn describe_chain(first: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(first);
    while let Some(e) = next {
        parts.push(match e.downcast_ref::<std::io::Error>() {
            Some(io) => describe_io(io),
            None => e.to_string(),
        });
        next = e.source();
    }
    parts.join(": ")
}

/// An I/O error in plain words: `connection refused`, `timed out`, else the OS's text.
fn describe_io(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::TimedOut => "timed out".to_string(),
        ErrorKind::ConnectionReset => "connection reset by the server".to_string(),
        _ => e.to_string(),
    }
}

/// Asks the server to cancel the statement running on the connection of `token` (a
/// `pg_advisory_lock` wait whose caller went away), over a connection encrypted as `target`
/// says. Errors are only logged: the connection is being closed anyway.
pub(crate) async fn cancel_query(target: &PgTarget, token: tokio_postgres::CancelToken) {
    let result = match target.tls() {
        Ok(Some(tls)) => token.cancel_query(tls).await,
        Ok(None) => token.cancel_query(NoTls).await,
        Err(e) => {
            tracing::warn!("lossless: cannot cancel a PostgreSQL statement on {target}: {e}");
            return;
        }
    };
    if let Err(e) = result {
        tracing::warn!(
            "lossless: cannot cancel a PostgreSQL statement on {target}: {}",
            describe_pg_error(&e)
        );
    }
}

/// A libpq TLS key [`PgTarget::parse`] reads itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TlsKey {
    Mode,
    RootCert,
}

impl TlsKey {
    fn of(key: &str) -> Option<Self> {
        match key {
            "sslmode" => Some(TlsKey::Mode),
            "sslrootcert" => Some(TlsKey::RootCert),
            _ => None,
        }
    }
}

/// `s` without its `sslmode` and `sslrootcert` (the driver refuses `verify-full` and knows no
/// `sslrootcert`), and their values in order. A string that does not split cleanly is given
/// back whole, for the driver to name what is wrong with it.
fn take_tls_keys(s: &str) -> (String, Vec<(TlsKey, String)>) {
    if is_postgres_url(s) {
        let Some((base, query)) = s.split_once('?') else {
            return (s.to_string(), Vec::new());
        };
        let mut kept = Vec::new();
        let mut taken = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |x: &str| {
                percent_encoding::percent_decode_str(x)
                    .decode_utf8()
                    .map(|c| c.into_owned())
            };
            match (decode(k), decode(v)) {
                (Ok(k), Ok(v)) if TlsKey::of(&k).is_some() => {
                    if let Some(key) = TlsKey::of(&k) {
                        taken.push((key, v));
                    }
                }
                _ => kept.push(pair),
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (rest, taken);
    }
    match split_key_values(s) {
        Some(pairs) => {
            let mut kept = Vec::new();
            let mut taken = Vec::new();
            for (key, value, raw) in pairs {
                match TlsKey::of(key) {
                    Some(k) => taken.push((k, value)),
                    None => kept.push(raw),
                }
            }
            (kept.join(" "), taken)
        }
        None => (s.to_string(), Vec::new()),
    }
}

/// libpq's `key = value` pairs (values bare or single-quoted, `\` escaping the next
/// character): each key, its unescaped value and the pair's text as written. `None` when `s`
/// does not read that way.
fn split_key_values(s: &str) -> Option<Vec<(&str, String, &str)>> {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            return Some(out);
        }
        let start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'=' {
            i += 1;
        }
        let key = &s[start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if key.is_empty() || bytes.get(i) != Some(&b'=') {
            return None;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return None,
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        value.push(*bytes.get(i + 1)?);
                        i += 2;
                    }
                    Some(b) => {
                        value.push(*b);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(&b) = bytes.get(i) {
                if b.is_ascii_whitespace() {
                    break;
                }
                if b == b'\\' {
                    value.push(*bytes.get(i + 1)?);
                    i += 2;
                } else {
                    value.push(b);
                    i += 1;
                }
            }
        }
        out.push((key, String::from_utf8(value).ok()?, &s[start..i]));
    }
}

/// A verifier for `prefer` and `require` without roots: libpq's meaning of those modes is
/// "encrypted, whoever answers", so the certificate is not checked; the handshake's signatures
/// still are (the provider's algorithms), so the session is bound to the key that signed it.
#[derive(Debug)]
struct NoCertificateCheck(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The standard chain-and-name verifier over `roots`.
fn webpki_verifier(
    roots: &RootCertStore,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots.clone()), provider.clone())
        .build()
        .map_err(|e| LosslessError::InvalidInput(format!("PostgreSQL TLS roots: {e}")))
}

/// Percent-encodes everything but unreserved URL characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// PostgreSQL's errors as the crate's: a broken connection is `ConnectionLost` (the call may
// succeed on a new one), anything else `Postgres`, both described without a password.

/// Whether `e` means the connection itself failed (so the same call may succeed on a new
/// one): a closed connection, an I/O error, SQLSTATE class 08 (connection exception) or an
/// administrator's or the server's shutdown (57P01–57P03).
fn connection_failed(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        }
        // No server error and not a conversion problem: the socket failed.
        None => {
            e.as_db_error().is_none()
                && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
        }
    }
}

impl From<tokio_postgres::Error> for LosslessError {
    fn from(e: tokio_postgres::Error) -> Self {
        let text = describe_pg_error(&e);
        if connection_failed(&e) {
            LosslessError::ConnectionLost(text)
        } else {
            LosslessError::Postgres(text)
        }
    }
}

impl From<deadpool_postgres::PoolError> for LosslessError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        let text = describe_pool_error(&e);
        match &e {
            // No new connection could be made: the server is down or unreachable for now.
            deadpool_postgres::PoolError::Backend(_) => LosslessError::ConnectionLost(text),
            _ => LosslessError::Postgres(text),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clawctx_test_support::pg::test_database;

    const SECRET: &str = "s3cr3t-Pa55word";

    /// A port on 127.0.0.1 nothing listens on (bound, then released).
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        port
    }

    #[test]
    fn redacted_never_shows_the_password() {
        for (input, shown) in [
            (
                format!("postgres://clawctx:{SECRET}@127.0.0.1:5433/lossless"),
                "postgres://clawctx@127.0.0.1:5433/lossless",
            ),
            (
                format!("postgresql://clawctx:{SECRET}@db.example/lossless"),
                "postgres://clawctx@db.example:5432/lossless",
            ),
            (
                format!("host=10.0.0.1,10.0.0.2 port=1,2 user=u password={SECRET} dbname=d"),
                "postgres://u@10.0.0.1:1,10.0.0.2:2/d",
            ),
            (
                format!("postgres://u:{SECRET}@%2Ftmp%2Fpg:6000/d"),
                "postgres://u@%2Ftmp%2Fpg:6000/d",
            ),
            (
                format!("postgres://u:{SECRET}@[::1]:7000/d"),
                "postgres://u@[::1]:7000/d",
            ),
        ] {
            let target = PgTarget::parse(&input).unwrap();
            assert_eq!(target.redacted(), shown, "{input}");
            assert_eq!(target.to_string(), shown);
            let debug = format!("{target:?}");
            assert!(!debug.contains(SECRET), "{debug}");
            assert!(debug.contains(shown), "{debug}");
        }
    }

    #[test]
    fn bad_connection_strings_are_refused_without_the_password() {
        for input in [
            format!("postgres://u:{SECRET}@h:notaport/d"),
            format!("postgres://u:{SECRET}@h/d?sslmode=bogus"),
            format!("host=h password={SECRET} nonsense"),
            format!("postgres://u:{SECRET}@/d"),
        ] {
            let err = PgTarget::parse(&input).unwrap_err();
            let text = err.to_string();
            eprintln!("{text}");
            assert!(
                matches!(err, LosslessError::InvalidInput(_)),
                "{input}: {text}"
            );
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.contains("PostgreSQL connection string"), "{text}");
        }
    }

    #[test]
    fn postgres_urls_are_told_from_paths() {
        assert!(is_postgres_url("postgres://u@h/d"));
        assert!(is_postgres_url("postgresql://u@h/d"));
        assert!(is_postgres_url("  POSTGRES://u@h/d"));
        assert!(!is_postgres_url("/var/lib/clawctx/lossless.db"));
        assert!(!is_postgres_url("postgres.db"));
        assert!(!is_postgres_url("host=h dbname=d"));
        assert!(!is_postgres_url(""));
        assert!(!is_postgres_url("pé"));
    }

    #[test]
    fn libpq_key_value_strings_are_postgres_connection_strings() {
        assert!(is_postgres_connection_string("host=db.example dbname=lcm"));
        assert!(is_postgres_connection_string("  host = db dbname=x"));
        assert!(is_postgres_connection_string("postgres://u@h/d"));
        assert!(!is_postgres_connection_string("/var/lib/x=y.db"));
        assert!(!is_postgres_connection_string("lossless.db"));
        assert!(!is_postgres_connection_string("./host=x"));
        assert!(!is_postgres_connection_string("1x=y"));
        assert!(!is_postgres_connection_string(""));
    }

    #[test]
    fn sslmode_and_sslrootcert_are_read_from_both_forms() {
        let t = PgTarget::parse(&format!(
            "postgres://u:{SECRET}@localhost:5432/d?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x"
        ))
        .unwrap();
        assert_eq!(t.ssl_mode(), SslMode::VerifyFull);
        assert_eq!(t.root_certs, RootCerts::File("/etc/ca.pem".into()));
        assert_eq!(t.config().get_application_name(), Some("x"));
        assert_eq!(
            t.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let t = PgTarget::parse(
            "host=localhost user=u password='a b\\'c' sslmode=require sslrootcert='/tmp/my ca.pem' dbname=d",
        )
        .unwrap();
        assert_eq!(t.ssl_mode(), SslMode::Require);
        assert_eq!(t.root_certs, RootCerts::File("/tmp/my ca.pem".into()));
        assert_eq!(t.config().get_password(), Some(&b"a b'c"[..]));
        assert_eq!(t.config().get_dbname(), Some("d"));
        let t = PgTarget::parse("host=h sslrootcert=system sslmode=verify-ca").unwrap();
        assert_eq!(
            (t.ssl_mode(), t.root_certs),
            (SslMode::VerifyCa, RootCerts::System)
        );
        // libpq's default.
        assert_eq!(
            PgTarget::parse("host=h").unwrap().ssl_mode(),
            SslMode::Prefer
        );
        assert_eq!(
            PgTarget::parse("postgres://h/d?sslmode=disable")
                .unwrap()
                .config()
                .get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        let err = PgTarget::parse("postgres://h/d?sslmode=verify-everything")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sslmode") && err.contains("verify-full"),
            "{err}"
        );
        // A CA file that is not there is named when the connector is made.
        let t =
            PgTarget::parse("host=h sslmode=verify-full sslrootcert=/nonexistent/ca.pem").unwrap();
        let err = t.tls().err().unwrap().to_string();
        assert!(err.contains("sslrootcert /nonexistent/ca.pem"), "{err}");
        assert!(PgTarget::parse("host=h sslmode=disable")
            .unwrap()
            .tls()
            .unwrap()
            .is_none());
        assert!(PgTarget::parse("host=h sslmode=require")
            .unwrap()
            .tls()
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn an_unreachable_database_fails_at_start_naming_host_and_port() {
        let port = closed_port();
        let target = PgTarget::parse(&format!(
            "postgres://clawctx:{SECRET}@127.0.0.1:{port}/lossless"
        ))
        .unwrap();
        let err = connect_pool(&target, 4).await.unwrap_err();
        let text = err.to_string();
        eprintln!("{text}");
        let LosslessError::Unreachable {
            target: shown,
            reason,
        } = &err
        else {
            panic!("expected Unreachable, got {err:?}");
        };
        assert_eq!(
            shown,
            &format!("postgres://clawctx@127.0.0.1:{port}/lossless")
        );
        assert!(reason.contains("connection refused"), "{reason}");
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(
            text.starts_with("cannot reach the PostgreSQL database at "),
            "{text}"
        );
        assert!(!text.contains(SECRET), "{text}");
        assert!(!format!("{err:?}").contains(SECRET));
    }

    #[tokio::test]
    async fn a_wrong_password_is_named_without_it() {
        let Some(db) = test_database("pg wrong password") else {
            return;
        };
        let good = PgTarget::parse(&db.url).unwrap();
        let mut bad = good.clone();
        bad.config.password(SECRET);
        let err = connect_pool(&bad, 1).await.unwrap_err();
        let text = err.to_string();
        eprintln!("{text}");
        assert!(matches!(err, LosslessError::Unreachable { .. }), "{text}");
        assert!(
            text.contains("password authentication failed for user"),
            "{text}"
        );
        assert!(!text.contains(SECRET), "{text}");
        // The right password connects, and the pool serves queries.
        let pool = connect_pool(&good, 2).await.unwrap();
        let client = pool.get().await.unwrap();
        let row = client
            .query_one("SELECT current_database()", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), db.name);
    }

    #[tokio::test]
    async fn a_missing_database_is_named() {
        let Some(db) = test_database("pg missing db") else {
            return;
        };
        let target = PgTarget::parse(&db.url)
            .unwrap()
            .with_dbname("clawctx_no_such_database");
        let err = connect_pool(&target, 1).await.unwrap_err();
        let text = err.to_string();
        eprintln!("{text}");
        assert!(matches!(err, LosslessError::Unreachable { .. }), "{text}");
        assert!(text.contains("clawctx_no_such_database"), "{text}");
        assert!(text.contains("does not exist"), "{text}");
    }

    #[tokio::test]
    async fn query_errors_carry_the_server_message() {
        let Some(db) = test_database("pg query error") else {
            return;
        };
        let pool = connect_pool(&PgTarget::parse(&db.url).unwrap(), 1)
            .await
            .unwrap();
        let client = pool.get().await.unwrap();
        let err: LosslessError = client
            .query("SELECT * FROM clawctx_no_such_table", &[])
            .await
            .unwrap_err()
            .into();
        let text = err.to_string();
        eprintln!("{text}");
        assert!(text.starts_with("postgres: "), "{text}");
        assert!(text.contains("clawctx_no_such_table"), "{text}");
        assert!(text.contains("42P01"), "{text}");
    }
}
