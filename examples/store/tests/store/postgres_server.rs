//! A throwaway PostgreSQL server for the tests: its own data directory in a temporary
//! directory, a free port on 127.0.0.1, no Unix socket, `trust` authentication, durability
//! off (the data is thrown away). Started once per test binary on first use, each test gets its
//! own database on it; a watchdog stops the server once the test binary has exited (however it
//! exits), and a [`PgServer`] dropped (also by unwinding) stops its server at once.
//!
//! The binaries are found under `/usr/lib/postgresql/*/bin` (Debian's layout; `PG_BIN` names
//! another directory). As root, `initdb` and `pg_ctl` run as the `postgres` user, who owns the
//! data directory. When no server can be started the tests that need it fail, saying what to
//! install.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::Connection as _;
use tempfile::TempDir;

/// A running PostgreSQL server; dropping it stops the server and removes its data.
pub(crate) struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    dir: TempDir,
}

/// The server shared by this test binary, once started (or why it could not be).
static SHARED: Mutex<Option<Result<PgServer, String>>> = Mutex::new(None);

/// Databases created so far, for unique names.
static DATABASES: AtomicUsize = AtomicUsize::new(0);

impl PgServer {
    /// Initialises a data directory and starts a server on a free loopback port.
    pub(crate) fn start() -> Result<Self, String> {
        let bin = binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("x402-store-pg")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let data = dir.path().join("data");
        let as_root = is_root();
        if as_root {
            // The postgres user must reach and own the data directory.
            set_mode(dir.path(), 0o755)?;
            std::fs::create_dir(&data).map_err(|e| format!("data directory: {e}"))?;
            run(Command::new("chown").arg("postgres:postgres").arg(&data))?;
        }
        let initdb = bin.join("initdb");
        run(as_postgres(as_root, &initdb)
            .args([
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data))?;
        let port = free_port()?;
        append_settings(&data, port)?;
        let server = Self {
            bin,
            data,
            port,
            dir,
        };
        server.start_again()?;
        Ok(server)
    }

    /// Starts the server (again, after [`stop_now`](Self::stop_now)) on its data directory.
    pub(crate) fn start_again(&self) -> Result<(), String> {
        let log = self.data.join("server.log");
        run(as_postgres(is_root(), &self.bin.join("pg_ctl"))
            .arg("start")
            .arg("-w")
            .args(["-t", "60"])
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&log))
        .map_err(|error| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{error}\n{log}")
        })
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`), as a crash or an outage would.
    pub(crate) fn stop_now(&self) {
        self.stop();
    }

    /// The URL of `database` on this server.
    pub(crate) fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// A server of its own for a test that stops it: stopped when dropped, and by the
    /// watchdog if this test binary exits first.
    pub(crate) fn start_own() -> Result<Self, String> {
        let server = Self::start()?;
        server.stop_when_this_process_exits()?;
        Ok(server)
    }

    /// Stops the server now (`pg_ctl stop -m immediate`), as a crash or an outage would.
    pub(crate) fn stop(&self) {
        let status = as_postgres(is_root(), &self.bin.join("pg_ctl"))
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !status.is_ok_and(|status| status.success()) {
            eprintln!(
                "could not stop the test PostgreSQL in {}",
                self.data.display()
            );
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A server a test already stopped has no postmaster.pid left.
        if self.data.join("postmaster.pid").exists() {
            self.stop();
        }
    }
}

/// The maintenance URL of the shared server, starting it on first use.
fn shared_admin_url() -> Result<String, String> {
    let mut shared = SHARED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let outcome = shared.get_or_insert_with(|| {
        let server = PgServer::start()?;
        server.stop_when_this_process_exits()?;
        Ok(server)
    });
    outcome
        .as_ref()
        .map(|server| server.url("postgres"))
        .map_err(Clone::clone)
}

/// Fails the test, never skips it, when the shared server cannot start.
pub(crate) fn require() {
    if let Err(why) = shared_admin_url() {
        panic!(
            "the PostgreSQL run of this test needs a PostgreSQL server and none could be started \
             ({why}); install PostgreSQL (apt-get install postgresql) or set PG_BIN"
        );
    }
}

/// A fresh, empty database on the shared server: its URL.
pub(crate) async fn fresh_database() -> String {
    let admin_url = shared_admin_url().unwrap_or_else(|why| panic!("no test PostgreSQL: {why}"));
    create_on(&admin_url).await
}

/// Creates a database on the server whose maintenance database is `admin_url`.
async fn create_on(admin_url: &str) -> String {
    let name = format!(
        "store_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("connect to {admin_url}: {e}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    admin.close().await.ok();
    admin_url
        .rsplit_once('/')
        .map(|(server, _)| format!("{server}/{name}"))
        .unwrap_or_else(|| panic!("no database in {admin_url}"))
}

impl PgServer {
    /// Leaves behind a watchdog that stops the server and removes its directory once this
    /// process has exited, however it exits (statics are never dropped, and a killed test
    /// binary runs no destructor).
    fn stop_when_this_process_exits(&self) -> Result<(), String> {
        let script = r#"
            while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
            if [ "$5" = root ]; then
                runuser -u postgres -- "$2" stop -m immediate -w -D "$3"
            else
                "$2" stop -m immediate -w -D "$3"
            fi
            rm -rf "$4"
        "#;
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("pg-watchdog")
            .arg(std::process::id().to_string())
            .arg(self.bin.join("pg_ctl"))
            .arg(&self.data)
            .arg(self.dir.path())
            .arg(if is_root() { "root" } else { "user" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("watchdog: {e}"))
    }
}

/// The directory holding `initdb` and `pg_ctl`.
fn binaries() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no /usr/lib/postgresql ({e})"))?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no /usr/lib/postgresql/*/bin/initdb".to_owned())
}

/// Whether this process runs as root (`/proc/self` belongs to its effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// `program`, run as the `postgres` user when `as_root`.
fn as_postgres(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn free_port() -> Result<u16, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|e| format!("free port: {e}"))
}

/// Loopback only, no Unix socket, room for every test's pool, no `fsync`. Commits stay
/// synchronous: a server stopped in immediate mode (as the outage tests do) keeps every
/// transaction it acknowledged, as a crashed production server does. With asynchronous commits it
/// silently lost the last fraction of a second of them — even the ledger's table when a test
/// stopped it right after start-up — and the restarted database answered "relation does not
/// exist" for good.
fn append_settings(data: &Path, port: u16) -> Result<(), String> {
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .map_err(|e| format!("postgresql.conf: {e}"))?;
    writeln!(
        conf,
        "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n\
         max_connections = 400\nfsync = off\nfull_page_writes = off"
    )
    .map_err(|e| format!("postgresql.conf: {e}"))
}

#[tokio::test]
async fn a_dropped_server_is_stopped() {
    require();
    let server = PgServer::start().unwrap();
    let url = server.url("postgres");
    let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert_eq!(one, 1);
    connection.close().await.unwrap();
    let data = server.data.clone();
    drop(server);
    assert!(sqlx::PgConnection::connect(&url).await.is_err());
    assert!(!data.exists(), "{} was left behind", data.display());
}
