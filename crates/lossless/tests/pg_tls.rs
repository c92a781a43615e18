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
    cluster.admin("ALTER SYSTEM SET ssl = on").await;
    cluster.admin("SELECT pg_reload_conf()").await;
    let mut on = false;
    for _ in 0..200 {
        if cluster.admin_value("SHOW ssl").await.as_deref() == Some("on") {
            on = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(on, "the cluster did not turn ssl on");

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
