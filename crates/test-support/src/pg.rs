//! PostgreSQL for tests: the server URL from `CLAWCTX_TEST_PG_URL`, and a fresh database per
//! test that is dropped when the test ends.
//!
//! Without `CLAWCTX_TEST_PG_URL` a test skips (prints why, the helper returns `None`), except
//! under `CI=true`, where a missing server is a failure: `.ci/run` starts one
//! (`scripts/pg-throwaway start DIR` does the same by hand).
//!
//! The helper talks to the server with the synchronous `postgres` client on a fresh thread, so
//! it works the same from a plain `#[test]` and from inside a tokio runtime (it never nests or
//! blocks on a runtime of the caller's).

use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable naming the PostgreSQL server the tests use (an admin URL: its user
/// may create databases).
pub const URL_VAR: &str = "CLAWCTX_TEST_PG_URL";

/// PostgreSQL's limit on identifier length (bytes).
const MAX_NAME: usize = 63;

/// The server URL from [`URL_VAR`], or `None` (after saying why) when it is unset outside CI.
///
/// # Panics
///
/// Under `CI=true` when [`URL_VAR`] is unset: CI must run the PostgreSQL tests, not skip them.
pub fn test_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_string()),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "{URL_VAR} is not set but CI=true: CI must provide PostgreSQL (.ci/run starts \
                     a throwaway cluster with scripts/pg-throwaway)"
                );
            }
            eprintln!("skipping: {URL_VAR} not set (scripts/pg-throwaway start DIR)");
            None
        }
    }
}

/// A database created for one test, dropped (`WITH (FORCE)`) when this value is dropped.
pub struct TestDatabase {
    /// The database's URL: the admin URL's credentials and server, this database.
    pub url: String,
    /// The database's name.
    pub name: String,
    admin_url: String,
}

impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs carry the password.
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// The first column of the first row of `sql` (e.g. a `count(*)`) read as a 64-bit
    /// integer, on a fresh connection to this database (for tests that check the store's
    /// tables directly). Panics with the statement and the server's message on failure.
    pub fn scalar(&self, sql: &str) -> i64 {
        let owned = sql.to_owned();
        on_fresh_thread(self.url.clone(), move |client| {
            client
                .query_one(owned.as_str(), &[])
                .map(|row| row.get::<_, i64>(0))
        })
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.name)
        );
        // Errors are ignored: the test is over, and a leftover database is harmless.
        let _ = on_fresh_thread(self.admin_url.clone(), move |client| {
            client.batch_execute(&sql)
        });
    }
}

/// A fresh, empty database named `clawctx_t_<hint>_<pid>_<counter>` on the test server, or
/// `None` when there is no test server (see [`test_url`]).
///
/// # Panics
///
/// When the server is given but the database cannot be created (a test failure: the server is
/// down or the URL's user may not create databases).
pub fn test_database(hint: &str) -> Option<TestDatabase> {
    Some(test_database_at(&test_url()?, hint))
}

/// [`test_database`] on the server of `admin_url` (a test's own cluster), not [`URL_VAR`]'s:
/// tests of one binary run concurrently, so a test must not point the process-wide variable
/// at its cluster.
///
/// # Panics
///
/// When the database cannot be created.
pub fn test_database_at(admin_url: &str, hint: &str) -> TestDatabase {
    let admin_url = admin_url.to_owned();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    // A name left over from a crashed run with the same pid is skipped, never dropped.
    for _ in 0..20 {
        let name = database_name(
            hint,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
        );
        let sql = format!("CREATE DATABASE {}", quote_ident(&name));
        match on_fresh_thread(admin_url.clone(), move |client| client.batch_execute(&sql)) {
            Ok(()) => {
                let url = with_dbname(&admin_url, &name);
                return TestDatabase {
                    url,
                    name,
                    admin_url,
                };
            }
            Err(e) if e.code() == Some(&postgres::error::SqlState::DUPLICATE_DATABASE) => continue,
            Err(e) => panic!(
                "cannot create the test database {name} on the test server: {}",
                describe(&e)
            ),
        }
    }
    panic!("cannot create a test database for {hint:?} on the test server: every name tried already exists");
}

/// `clawctx_t_<sanitized hint>_<pid>_<counter>`, lowercase, at most 63 bytes.
fn database_name(hint: &str, pid: u32, counter: u32) -> String {
    let suffix = format!("_{pid}_{counter}");
    let prefix = "clawctx_t_";
    let room = MAX_NAME.saturating_sub(prefix.len() + suffix.len());
    let hint: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(room)
        .collect();
    format!("{prefix}{hint}{suffix}")
}

/// `"name"` with embedded quotes doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The URL with its database replaced by `dbname`: the path of a `postgres://` /
/// `postgresql://` URL, else (key=value form) an appended `dbname=` (the last one wins).
fn with_dbname(url: &str, dbname: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, after) = rest.split_at(authority_end);
            let query = after.find('?').map(|i| &after[i..]).unwrap_or("");
            return format!("{scheme}{authority}/{dbname}{query}");
        }
    }
    format!("{url} dbname={dbname}")
}

/// Connects to `url` on a new thread (no runtime of the caller's involved), runs `job`, closes.
fn on_fresh_thread<T: Send + 'static>(
    url: String,
    job: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error> + Send + 'static,
) -> Result<T, postgres::Error> {
    let handle = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
        let out = job(&mut client);
        let _ = client.close();
        out
    });
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The error and its causes (`postgres::Error`'s own text omits them, e.g. the server's message).
fn describe(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(admin_url: &str, name: &str) -> bool {
        let name = name.to_string();
        on_fresh_thread(admin_url.to_string(), move |c| {
            c.query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&name],
            )
        })
        .map(|row| row.get::<_, i64>(0) == 1)
        .unwrap()
    }

    #[test]
    fn names_are_lowercase_sanitized_and_fit() {
        assert_eq!(
            database_name("My Test-1", 42, 7),
            "clawctx_t_my_test_1_42_7"
        );
        let long = database_name(&"x".repeat(200), u32::MAX, u32::MAX);
        assert_eq!(long.len(), MAX_NAME);
        assert!(long.ends_with(&format!("_{}_{}", u32::MAX, u32::MAX)));
        assert_eq!(database_name("é", 1, 2), "clawctx_t___1_2");
    }

    #[test]
    fn the_database_of_a_url_is_replaced() {
        assert_eq!(
            with_dbname("postgres://u:p@127.0.0.1:5432/postgres", "t1"),
            "postgres://u:p@127.0.0.1:5432/t1"
        );
        assert_eq!(with_dbname("postgresql://u@h", "t1"), "postgresql://u@h/t1");
        assert_eq!(
            with_dbname("postgres://u@h:1/db?sslmode=disable", "t1"),
            "postgres://u@h:1/t1?sslmode=disable"
        );
        assert_eq!(
            with_dbname("postgres://u@h?sslmode=disable", "t1"),
            "postgres://u@h/t1?sslmode=disable"
        );
        assert_eq!(
            with_dbname("host=h user=u dbname=x", "t1"),
            "host=h user=u dbname=x dbname=t1"
        );
    }

    #[test]
    fn databases_are_distinct_and_dropped() {
        let Some(first) = test_database("support two") else {
            return;
        };
        let second = test_database("support two").unwrap();
        assert_ne!(first.name, second.name);
        assert_ne!(first.url, second.url);
        // Each URL reaches its own database.
        for db in [&first, &second] {
            let current: String = on_fresh_thread(db.url.clone(), |c| {
                c.query_one("SELECT current_database()", &[])
                    .map(|r| r.get(0))
            })
            .unwrap();
            assert_eq!(current, db.name);
        }
        let admin = second.admin_url.clone();
        let name = second.name.clone();
        assert!(exists(&admin, &name));
        drop(second);
        assert!(!exists(&admin, &name), "{name} still exists after drop");
        assert!(exists(&admin, &first.name));
    }

    #[tokio::test]
    async fn works_inside_a_runtime() {
        let Some(db) = test_database("in runtime") else {
            return;
        };
        assert!(db.name.starts_with("clawctx_t_in_runtime_"));
        drop(db);
    }
}
