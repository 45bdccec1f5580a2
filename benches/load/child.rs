//! Child processes that print their listening address as their first line: the stub
//! facilitator, the peers' apps and the store. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A running child and the address it announced.
pub(crate) struct Announced {
    child: Child,
    pub(crate) address: SocketAddr,
}

impl Announced {
    /// Starts `command` and reads the address it prints first.
    pub(crate) fn spawn(mut command: Command, what: &str) -> Result<Self, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| format!("starting {what}: {error}"))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(|error| format!("{what}: {error}"))?;
        }
        let address = match line.trim().parse() {
            Ok(address) => address,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} printed {line:?}, not its address"));
            }
        };
        Ok(Self { child, address })
    }

    /// The child's process id, as `/proc` names it.
    pub(crate) fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
