//! The PostgreSQL database's address and the connection pool.
//!
//! A [`PgTarget`] is parsed from a connection string (`postgres://` / `postgresql://` URL, or
//! libpq's `key=value` form) and is only ever shown redacted: user, hosts, ports and database,
//! never the password (`Display` and `Debug` both redact). [`connect_pool`] checks out one
//! connection at once, so a database that is down, refuses the login or does not exist fails
//! at start with [`LosslessError::Unreachable`] rather than on the first turn.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;

use crate::error::{LosslessError, Result};

/// PostgreSQL's default port.
const DEFAULT_PORT: u16 = 5432;

/// How long one connection attempt may take when the connection string sets no
/// `connect_timeout` (a black-holed host fails at start instead of hanging).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL database to connect to. Shown (`Display`, `Debug`) without its password.
#[derive(Clone)]
pub struct PgTarget {
    config: tokio_postgres::Config,
}

impl PgTarget {
    /// Parses a connection string: a `postgres://` / `postgresql://` URL or libpq's `key=value`
    /// form. The error names what is wrong, never the password.
    pub fn parse(s: &str) -> Result<Self> {
        let config = tokio_postgres::Config::from_str(s.trim()).map_err(|e| {
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
        Ok(PgTarget { config })
    }

    /// The same server and credentials, database `dbname`.
    pub fn with_dbname(&self, dbname: &str) -> PgTarget {
        let mut config = self.config.clone();
        config.dbname(dbname);
        PgTarget { config }
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
/// file path. libpq's `key=value` form is not recognized here: it is indistinguishable from a
/// file name.
pub fn is_postgres_url(s: &str) -> bool {
    let s = s.trim_start();
    ["postgres://", "postgresql://"].iter().any(|scheme| {
        s.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

/// A pool of up to `max_size` connections (at least one) to `target`, without TLS.
///
/// One connection is checked out before returning, so a database that is down, refuses the
/// login or does not exist fails here with [`LosslessError::Unreachable`], naming the target
/// (redacted) and why (`connection refused`, the server's `password authentication failed
/// for user "..."`, ...).
pub async fn connect_pool(target: &PgTarget, max_size: usize) -> Result<Pool> {
    let mut config = target.config.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(max_size.max(1))
        .build()
        .map_err(|e| {
            LosslessError::Postgres(format!(
                "cannot build the connection pool for {target}: {e}"
            ))
        })?;
    match pool.get().await {
        Ok(_first) => Ok(pool),
        Err(e) => Err(LosslessError::Unreachable {
            target: target.redacted(),
            reason: target.scrub(unreachable_reason(&e)),
        }),
    }
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
        let mut config = good.config().clone();
        config.password(SECRET);
        let bad = PgTarget { config };
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
        let mut config = PgTarget::parse(&db.url).unwrap().config().clone();
        config.dbname("clawctx_no_such_database");
        let err = connect_pool(&PgTarget { config }, 1).await.unwrap_err();
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
