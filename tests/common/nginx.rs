//! Debian's `nginx` as a reverse proxy in front of a server under test: started in the
//! foreground (`daemon off`) on a free loopback port, with a configuration written here under a
//! temporary prefix (`-p`), its error log kept for the failure message, stopped with SIGTERM
//! when dropped.
//!
//! The configuration is the stock one an operator writes first — `proxy_pass` and the `Host`
//! header, every buffer at nginx's default (`proxy_buffer_size` one 4 KB page) — so a response
//! whose headers do not fit that buffer comes back `502 Bad Gateway`, as it would in front of a
//! real deployment. A missing `nginx` fails the test: `tests/run.sh` installs it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts the binary, when it is not on `PATH` (`/usr/sbin` is not, for most users).
const DEBIAN_NGINX: &str = "/usr/sbin/nginx";

/// A running nginx; stopped (SIGTERM, then waited for) when dropped.
pub(crate) struct Nginx {
    child: Child,
    /// The temporary prefix: configuration, logs, pid file, temporary files.
    dir: tempfile::TempDir,
    port: u16,
}

/// A loopback port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// The `nginx` binary: on `PATH`, else Debian's.
fn binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
    });
    let found = on_path.or_else(|| Some(PathBuf::from(DEBIAN_NGINX)).filter(|p| p.is_file()));
    found.expect(
        "nginx is not installed: these tests put a real nginx in front of the server \
         (`apt-get install nginx`; tests/run.sh installs it)",
    )
}

impl Nginx {
    /// nginx on `127.0.0.1:port`, forwarding everything to `upstream` with the stock
    /// configuration (see the module docs); waits until it accepts connections.
    pub(crate) fn start(port: u16, upstream: SocketAddr) -> Self {
        let location =
            format!("proxy_pass http://{upstream};\n            proxy_set_header Host $host;");
        Self::start_with(port, &location)
    }

    /// nginx on `127.0.0.1:port` with `location` as the body of its `location /` block.
    pub(crate) fn start_with(port: u16, location: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Workers drop root's privileges when the tests run as root: let them into the prefix.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .expect("the prefix's permissions");
        }
        let prefix = dir.path().display();
        let config = format!(
            "daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{
    worker_connections 256;
}}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            {location}
        }}
    }}
}}
"
        );
        let config_path = dir.path().join("nginx.conf");
        std::fs::write(&config_path, config).expect("nginx.conf written");
        let child = Command::new(binary())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&config_path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx started");
        let mut nginx = Self { child, dir, port };
        nginx.wait_until_listening();
        nginx
    }

    fn wait_until_listening(&mut self) {
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "nginx exited ({status}) before listening:\n{}",
                    self.error_log()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx did not listen on 127.0.0.1:{} within 10 s:\n{}",
                self.port,
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:PORT`, the origin clients use.
    pub(crate) fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What nginx logged so far (its error log).
    pub(crate) fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers and exits.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
