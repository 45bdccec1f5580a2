//! An exclusive OS file lock per receiver, so that a second process keeping channels of the same
//! receiver in its own memory refuses to start instead of accepting vouchers the first already
//! counted.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::PathBuf;

use x402_wire::Network;

/// The lock file of the channels paid to `receiver` under `receiver_authorizer` on `network`
/// (what, with the payer, names a channel): in the temporary directory.
pub(crate) fn path(network: &Network, receiver: &str, receiver_authorizer: &str) -> PathBuf {
    let clean = |text: &str| -> String {
        text.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    std::env::temp_dir().join(format!(
        "tower-x402-channels-{}-{}-{}.lock",
        clean(network.as_str()),
        clean(receiver),
        clean(receiver_authorizer)
    ))
}

/// Takes the lock at `path` for as long as the returned file is open (the process's life at
/// most: the OS releases it when the process ends, however it ends).
///
/// # Errors
///
/// [`io::ErrorKind::WouldBlock`] when another process holds it; any error opening the file.
pub(crate) fn take(path: &PathBuf) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    lock(&file)?;
    Ok(file)
}

#[cfg(unix)]
fn lock(file: &File) -> io::Result<()> {
    rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(io::Error::from)
}

#[cfg(not(unix))]
fn lock(_: &File) -> io::Result<()> {
    // No advisory lock here: the documentation's rule (one store per receiver) stands alone.
    Ok(())
}
