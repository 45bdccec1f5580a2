//! Child processes of the benchmark: the stub facilitator, the peers' apps and the store.
//! Killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A running child process, killed when dropped.
pub(crate) struct Running(Child);

impl Running {
    /// Starts `command`; `what` names it in errors.
    pub(crate) fn spawn(command: &mut Command, what: &str) -> Result<Self, String> {
        command
            .spawn()
            .map(Self)
            .map_err(|error| format!("starting {what}: {error}"))
    }

    /// The child's process id, as `/proc` names it.
    pub(crate) fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running child that printed its listening address as its first line.
pub(crate) struct Announced {
    process: Running,
    pub(crate) address: SocketAddr,
}

impl Announced {
    /// Starts `command` and reads the address it prints first.
    pub(crate) fn spawn(mut command: Command, what: &str) -> Result<Self, String> {
        let mut process = Running::spawn(command.stdout(Stdio::piped()), what)?;
        let mut line = String::new();
        if let Some(stdout) = process.0.stdout.take() {
            BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(|error| format!("{what}: {error}"))?;
        }
        let address = line
            .trim()
            .parse()
            .map_err(|_| format!("{what} printed {line:?}, not its address"))?;
        Ok(Self { process, address })
    }

    /// The child's process id, as `/proc` names it.
    pub(crate) fn pid(&self) -> String {
        self.process.pid()
    }
}

/// The stub facilitator (this binary's `stub` command) as a child process.
pub(crate) fn start_stub() -> Result<Announced, String> {
    let exe = std::env::current_exe().map_err(|error| error.to_string())?;
    let mut command = Command::new(exe);
    command.arg("stub");
    Announced::spawn(command, "the stub facilitator")
}
