//! The PostgreSQL store over TLS (docs/operations.md#connecting-to-managed-engines), against a
//! real server: a throwaway cluster of Debian's PostgreSQL started with `ssl = on` and a
//! `pg_hba.conf` that takes TLS connections only, its certificate signed by a CA made here
//! (rcgen) for `localhost`. The store connects with `verify-full` and `verify-ca`, is refused
//! with `disable` (the server takes no plaintext) and with another CA, and a refusal names the
//! engine and the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use store::StoreError;

/// A PostgreSQL cluster that takes TLS only, stopped when dropped.
struct TlsPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    ca: PathBuf,
    other_ca: PathBuf,
}

fn as_postgres(program: &Path) -> Command {
    // initdb refuses to run as root; the cluster belongs to the `postgres` user then.
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn chown_postgres(path: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A CA, and a certificate it signs for `names`: (CA PEM, certificate PEM, key PEM).
fn ca_and_server(names: &[&str]) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Vigil test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    let server = server_params.signed_by(&server_key, &ca).unwrap();
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

impl TlsPostgres {
    fn start() -> TlsPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Debian's postgresql (scripts/test.sh installs it)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("initdb").exists())
            .max()
            .expect("a PostgreSQL with initdb");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        chown_postgres(dir.path());
        let out = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "vigil", "--auth=trust"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        let (ca, cert, key) = ca_and_server(&["localhost"]);
        let (other_ca, _, _) = ca_and_server(&["localhost"]);
        std::fs::write(data.join("server.crt"), cert).unwrap();
        std::fs::write(data.join("server.key"), key).unwrap();
        std::fs::set_permissions(
            data.join("server.key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        conf.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(data.join("postgresql.conf"), conf).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        chown_postgres(dir.path());
        let ca_path = dir.path().join("ca.pem");
        let other_path = dir.path().join("other-ca.pem");
        std::fs::write(&ca_path, ca).unwrap();
        std::fs::write(&other_path, other_ca).unwrap();

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = as_postgres(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-w")
            .arg("-l")
            .arg(dir.path().join("server.log"))
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                dir.path().display()
            ))
            .arg("start")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
        );
        TlsPostgres {
            dir,
            bin,
            port,
            ca: ca_path,
            other_ca: other_path,
        }
    }

    fn url(&self, params: &str) -> String {
        format!("postgres://vigil@localhost:{}/postgres?{params}", self.port)
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_speaks_tls_to_postgresql_and_verifies_its_certificate() {
    let pg = TlsPostgres::start();
    let ca = pg.ca.display().to_string();

    // verify-full: the chain and the name; `vigil migrate` and the store both connect.
    let full = pg.url(&format!("sslmode=verify-full&sslrootcert={ca}"));
    store::postgres::migrations::migrate(&full)
        .await
        .expect("migrate over TLS");
    let opened = store::open(&full).await.expect("the store opens over TLS");
    opened.ping().await.expect("a query over TLS");

    // verify-ca: the chain only.
    let ca_only = pg.url(&format!("sslmode=verify-ca&sslrootcert={ca}"));
    store::open(&ca_only).await.unwrap().ping().await.unwrap();

    // Plaintext to a server that takes TLS only: refused, saying why.
    let plain = store::postgres::migrations::migrate(&pg.url("sslmode=disable")).await;
    match plain {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.contains("PostgreSQL"), "{why}");
            assert!(
                why.contains("pg_hba") || why.contains("no encryption"),
                "{why}"
            );
        }
        other => panic!("plaintext is refused: {other:?}"),
    }

    // Another CA: the handshake fails verification; nothing falls back to plaintext.
    let other = pg.other_ca.display().to_string();
    let wrong = store::postgres::migrations::migrate(
        &pg.url(&format!("sslmode=verify-full&sslrootcert={other}")),
    )
    .await;
    match wrong {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.contains("PostgreSQL"), "{why}");
            assert!(why.to_lowercase().contains("certificate"), "{why}");
        }
        other => panic!("a certificate of another CA is refused: {other:?}"),
    }
}
