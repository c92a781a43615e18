//! TLS to PostgreSQL (`sslmode`) against a real server: a throwaway cluster
//! (`scripts/pg-throwaway`) started for this test with `ssl = on` and a certificate made here
//! (`rcgen`: a test CA and a server certificate for `localhost`).
//!
//! What each mode must do: `disable` stays plaintext; `prefer` (the default) and `require`
//! encrypt without checking the certificate (a self-signed one is fine); `verify-full` accepts
//! the server only with a CA that signed its certificate and a host name the certificate names;
//! `verify-ca` checks the CA but not the name; `require` against a server without TLS fails.
//! Whether a session is encrypted is read from the server's own `pg_stat_ssl`.
//!
//! Runs where the other PostgreSQL tests run (`CLAWCTX_TEST_PG_URL` set, which says the
//! machine has a PostgreSQL server; under `CI=true` it must), since it needs `initdb`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clawctx_lossless::pg::PgStore;
use clawctx_lossless::LosslessError;

/// A throwaway cluster, stopped and removed when dropped.
struct Cluster {
    dir: PathBuf,
    /// The superuser's password.
    password: String,
    port: u16,
    _parent: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-throwaway")
}

impl Cluster {
    fn start() -> Cluster {
        // Short: the cluster's unix socket lives in it.
        let parent = tempfile::Builder::new()
            .prefix("pgtls")
            .tempdir_in("/tmp")
            .unwrap();
        let dir = parent.path().join("c");
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-throwaway start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = std::fs::read_to_string(dir.join("url")).unwrap();
        // postgres://clawctx:PASSWORD@127.0.0.1:PORT/postgres
        let rest = url.trim().strip_prefix("postgres://clawctx:").unwrap();
        let (password, rest) = rest.split_once("@127.0.0.1:").unwrap();
        let port = rest.split_once('/').unwrap().0.parse().unwrap();
        Cluster {
            dir,
            password: password.to_string(),
            port,
            _parent: parent,
        }
    }

    /// A libpq key=value connection string to this cluster through host name `host`
    /// (resolved to 127.0.0.1 by `hostaddr`, so the name is only what TLS checks), with
    /// `extra` appended.
    fn conn(&self, host: &str, app: &str, extra: &str) -> String {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} user=clawctx password={} dbname=postgres \
             application_name={app} {extra}",
            self.port, self.password
        )
    }

    /// Runs `sql` as the superuser over the unix socket.
    async fn admin(&self, sql: &str) -> Vec<tokio_postgres::SimpleQueryMessage> {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(&self.dir)
            .port(self.port)
            .user("clawctx")
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client.simple_query(sql).await.unwrap()
    }

    /// The first column of the first row of `sql`.
    async fn admin_value(&self, sql: &str) -> Option<String> {
        self.admin(sql).await.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
    }

    /// Whether the sessions of application `app` are encrypted (`None`: no session).
    async fn encrypted(&self, app: &str) -> Option<bool> {
        self.admin_value(&format!(
            "SELECT bool_and(s.ssl)::text FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = '{app}'"
        ))
        .await
        .map(|v| v == "true")
    }
}

impl Cluster {
    /// Turns `ssl` on with the `server.crt` / `server.key` already in the data directory.
    async fn ssl_on(&self) {
        self.admin("ALTER SYSTEM SET ssl = on").await;
        self.admin("SELECT pg_reload_conf()").await;
        let mut on = false;
        for _ in 0..200 {
            if self.admin_value("SHOW ssl").await.as_deref() == Some("on") {
                on = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        assert!(on, "the cluster did not turn ssl on");
    }

    /// Installs `cert` and `key` (files) as the server's and turns `ssl` on.
    async fn ssl_on_with(&self, cert: &Path, key: &Path) {
        let data = self.dir.join("data");
        write_owned(
            &data.join("server.crt"),
            &std::fs::read_to_string(cert).unwrap(),
            &data,
        );
        write_owned(
            &data.join("server.key"),
            &std::fs::read_to_string(key).unwrap(),
            &data,
        );
        self.ssl_on().await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// A CA and a certificate it signed for `names`: (CA PEM, certificate PEM, key PEM).
fn certificate(names: &[&str]) -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "clawctx test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let mut server =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.distinguished_name.push(DnType::CommonName, names[0]);
    let server_key = KeyPair::generate().unwrap();
    let server_cert = server.signed_by(&server_key, &ca_cert, &ca_key).unwrap();
    (ca_cert.pem(), server_cert.pem(), server_key.serialize_pem())
}

/// Writes `text` to `path`, owned like `owner_of` (the cluster's user reads it), mode 0600.
fn write_owned(path: &Path, text: &str, owner_of: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let meta = std::fs::metadata(owner_of).unwrap();
    if meta.uid() != nix_uid() {
        std::os::unix::fs::chown(path, Some(meta.uid()), Some(meta.gid())).unwrap();
    }
}

/// This process's user id (the owner of a file it creates).
fn nix_uid() -> u32 {
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().metadata().unwrap().uid()
}

/// The error of a store that must not open, as text.
async fn refused(conn: &str) -> String {
    match PgStore::open_url(conn).await {
        Ok(_) => panic!("opened, but must be refused: {conn}"),
        Err(e) => {
            let text = e.to_string();
            assert!(matches!(e, LosslessError::Unreachable { .. }), "{text}");
            text
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmodes_against_a_server_with_a_self_signed_certificate() {
    if clawctx_test_support::pg::test_url().is_none() {
        return;
    }
    let cluster = Cluster::start();
    // Before TLS is on: `require` refuses a server that cannot encrypt; `prefer` falls back.
    let text = refused(&cluster.conn("localhost", "t_require_plain", "sslmode=require")).await;
    eprintln!("require against a plaintext server: {text}");
    let _plain = PgStore::open_url(&cluster.conn("localhost", "t_prefer_plain", ""))
        .await
        .unwrap();
    assert_eq!(cluster.encrypted("t_prefer_plain").await, Some(false));

    // TLS on, with a certificate for `localhost` from a CA of this test.
    let (ca, cert, key) = certificate(&["localhost"]);
    let data = cluster.dir.join("data");
    write_owned(&data.join("server.crt"), &cert, &data);
    write_owned(&data.join("server.key"), &key, &data);
    let ca_file = cluster.dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let (other_ca, _, _) = certificate(&["localhost"]);
    let other_ca_file = cluster.dir.join("other-ca.pem");
    std::fs::write(&other_ca_file, &other_ca).unwrap();
    cluster.ssl_on().await;

    // Encrypted without a check of the certificate.
    let _require = PgStore::open_url(&cluster.conn("localhost", "t_require", "sslmode=require"))
        .await
        .unwrap();
    assert_eq!(cluster.encrypted("t_require").await, Some(true));
    let _prefer = PgStore::open_url(&cluster.conn("127.0.0.1", "t_prefer", ""))
        .await
        .unwrap();
    assert_eq!(cluster.encrypted("t_prefer").await, Some(true));
    let _disable = PgStore::open_url(&cluster.conn("localhost", "t_disable", "sslmode=disable"))
        .await
        .unwrap();
    assert_eq!(cluster.encrypted("t_disable").await, Some(false));

    // verify-full: the right CA and the name the certificate holds.
    let ca_arg = format!("sslrootcert='{}'", ca_file.display());
    let _full = PgStore::open_url(&cluster.conn(
        "localhost",
        "t_full",
        &format!("sslmode=verify-full {ca_arg}"),
    ))
    .await
    .unwrap();
    assert_eq!(cluster.encrypted("t_full").await, Some(true));
    // The same in URL form.
    let url = format!(
        "postgres://clawctx:{}@localhost:{}/postgres?hostaddr=127.0.0.1&application_name=t_full_url&sslmode=verify-full&sslrootcert={}",
        cluster.password,
        cluster.port,
        ca_file.display().to_string().replace('/', "%2F")
    );
    let _full_url = PgStore::open_url(&url).await.unwrap();
    assert_eq!(cluster.encrypted("t_full_url").await, Some(true));

    // A host name the certificate does not hold is refused by verify-full...
    let text = refused(&cluster.conn(
        "127.0.0.1",
        "t_wrong_name",
        &format!("sslmode=verify-full {ca_arg}"),
    ))
    .await;
    eprintln!("verify-full, wrong name: {text}");
    assert!(text.contains("certificate"), "{text}");
    assert!(!text.contains(&cluster.password), "{text}");
    // ... and accepted by verify-ca, which checks the chain only.
    let _ca_only = PgStore::open_url(&cluster.conn(
        "127.0.0.1",
        "t_verify_ca",
        &format!("sslmode=verify-ca {ca_arg}"),
    ))
    .await
    .unwrap();
    assert_eq!(cluster.encrypted("t_verify_ca").await, Some(true));

    // A CA that did not sign the certificate: refused by every checking mode, and by
    // `require` with that CA (libpq: `require` with a root file checks the chain).
    for mode in ["verify-full", "verify-ca", "require"] {
        let text = refused(&cluster.conn(
            "localhost",
            "t_other_ca",
            &format!("sslmode={mode} sslrootcert='{}'", other_ca_file.display()),
        ))
        .await;
        eprintln!("{mode}, another CA: {text}");
        assert!(text.contains("certificate"), "{mode}: {text}");
    }
}

/// Runs `openssl` with `args` in `dir`; `false` when there is no `openssl` to run.
fn openssl(dir: &Path, args: &[&str]) -> bool {
    let out = match Command::new("openssl").args(args).current_dir(dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(e) => panic!("openssl {args:?}: {e}"),
    };
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// One connection attempt: host, sslmode, sslrootcert, whether it is accepted.
type Case = (&'static str, &'static str, &'static str, bool);

/// Whether libpq (through `psql`) connects with `conn`; `None` without a `psql` on PATH.
fn psql_connects(conn: &str) -> Option<bool> {
    let out = Command::new("psql")
        .args(["-X", "-A", "-t", "-c", "SELECT 1", conn])
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .output()
        .ok()?;
    Some(out.status.success())
}

/// Certificates made the way PostgreSQL's documentation ("Creating Certificates") makes them,
/// with the `openssl` command line: a self-signed one (`openssl req -x509`, which is `CA:TRUE`
/// and names the host only as its Common Name, no subjectAltName) used as its own root, and
/// a CA's (`-extensions v3_ca`) signing a server certificate (`openssl x509 -req -CA`: X.509
/// v1, Common Name only). libpq accepts both under `verify-full` for the name they hold and
/// `verify-ca` for any name; clawctx must too, and must still refuse another root and another
/// name. Where `psql` is on PATH, each verdict is checked against libpq's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_made_certificates_are_taken_as_libpq_takes_them() {
    if clawctx_test_support::pg::test_url().is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let self_signed = [
        "req",
        "-new",
        "-x509",
        "-days",
        "30",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "self.key",
        "-out",
        "self.crt",
    ];
    if !openssl(dir, &self_signed) {
        eprintln!("no openssl on PATH: skipped");
        return;
    }
    // A second self-signed certificate: a root that signed nothing here.
    assert!(openssl(
        dir,
        &[
            "req",
            "-new",
            "-x509",
            "-days",
            "30",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "other.key",
            "-out",
            "other.crt",
        ]
    ));
    // The documentation's CA recipe.
    let cnf = dir.join("ca.cnf");
    std::fs::write(
        &cnf,
        "[v3_ca]\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always,issuer\nbasicConstraints=critical,CA:true\n",
    )
    .unwrap();
    for args in [
        &[
            "req",
            "-new",
            "-nodes",
            "-subj",
            "/CN=root.example",
            "-keyout",
            "root.key",
            "-out",
            "root.csr",
        ][..],
        &[
            "x509",
            "-req",
            "-in",
            "root.csr",
            "-days",
            "30",
            "-extfile",
            "ca.cnf",
            "-extensions",
            "v3_ca",
            "-signkey",
            "root.key",
            "-out",
            "root.crt",
        ],
        &[
            "req",
            "-new",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-days",
            "30",
            "-CA",
            "root.crt",
            "-CAkey",
            "root.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
        ],
    ] {
        assert!(openssl(dir, args));
    }
    let text = |name: &str| {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in", name])
            .current_dir(dir)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // What makes them hard for webpki, as this test means them to be.
    assert!(text("self.crt").contains("CA:TRUE"), "{}", text("self.crt"));
    assert!(!text("self.crt").contains("Subject Alternative Name"));
    assert!(
        text("server.crt").contains("Version: 1"),
        "{}",
        text("server.crt")
    );

    let file = |name: &str| dir.join(name).display().to_string();
    // (server certificate and key, cases)
    let setups: [(&str, &str, Vec<Case>); 2] = [
        (
            "self.crt",
            "self.key",
            vec![
                ("localhost", "verify-full", "self.crt", true),
                ("127.0.0.1", "verify-ca", "self.crt", true),
                ("127.0.0.1", "require", "self.crt", true),
                ("127.0.0.1", "verify-full", "self.crt", false),
                ("localhost", "verify-full", "other.crt", false),
                ("localhost", "verify-ca", "other.crt", false),
                ("localhost", "require", "other.crt", false),
            ],
        ),
        (
            "server.crt",
            "server.key",
            vec![
                ("localhost", "verify-full", "root.crt", true),
                ("127.0.0.1", "verify-ca", "root.crt", true),
                ("127.0.0.1", "verify-full", "root.crt", false),
                ("localhost", "verify-full", "other.crt", false),
                ("localhost", "verify-ca", "self.crt", false),
                // The server's certificate alone is no root: it is not self-signed (OpenSSL
                // without partial chains refuses it too).
                ("localhost", "verify-full", "server.crt", false),
            ],
        ),
    ];
    let mut checked_with_psql = 0;
    for (cert, key, cases) in setups {
        let cluster = Cluster::start();
        cluster.ssl_on_with(&dir.join(cert), &dir.join(key)).await;
        for (i, (host, mode, root, accepted)) in cases.into_iter().enumerate() {
            let app = format!("t_openssl_{i}");
            let conn = cluster.conn(
                host,
                &app,
                &format!("sslmode={mode} sslrootcert='{}'", file(root)),
            );
            let what = format!("{cert} as the server's, {mode} to {host} with root {root}");
            if let Some(libpq) = psql_connects(&conn) {
                assert_eq!(libpq, accepted, "libpq disagrees with this test: {what}");
                checked_with_psql += 1;
            }
            if accepted {
                let opened = PgStore::open_url(&conn).await;
                assert!(opened.is_ok(), "{what}: refused: {}", opened.err().unwrap());
                assert_eq!(cluster.encrypted(&app).await, Some(true), "{what}");
            } else {
                let text = refused(&conn).await;
                eprintln!("{what}: {text}");
                assert!(text.contains("certificate"), "{what}: {text}");
            }
        }
    }
    eprintln!("{checked_with_psql} verdicts checked against psql");
}
