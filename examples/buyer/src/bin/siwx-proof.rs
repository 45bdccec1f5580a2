//! Signs in to a `sign-in-with-x` challenge with a sandbox wallet and prints the proof.
//!
//! ```text
//! cargo run -p x402-buyer --bin siwx-proof < extension.json
//! cargo run -p x402-buyer --bin siwx-proof -- --extension extension.json --private-key 0x…
//! ```
//!
//! Reads a 402's `extensions["sign-in-with-x"]` object (JSON, from `--extension FILE` or stdin),
//! has the sandbox wallet answer it on the first EVM chain it supports (`personal_sign` of the
//! EIP-4361 message), and prints the `SIGN-IN-WITH-X` header value (base64 JSON) as one line on
//! stdout. The key comes from `--private-key` or `SIWX_PRIVATE_KEY` (64 hex digits); without
//! either, a fixed key is used, so the address is always
//! `0x2c7536E3605D9C16a7a3D7b1898e529396a65c23`.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;
use x402_buyer::Wallet;

/// The key used when none is given: a well-known test key that holds nothing anywhere.
const FIXED_PRIVATE_KEY: &str = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";

/// Prints the `SIGN-IN-WITH-X` header a sandbox wallet signs for a challenge.
#[derive(Debug, Parser)]
#[command(name = "siwx-proof")]
struct Args {
    /// File holding the `sign-in-with-x` extension JSON; stdin when absent.
    #[arg(long, value_name = "FILE")]
    extension: Option<PathBuf>,
    /// The wallet's private key, 64 hex digits (optionally `0x`-prefixed).
    #[arg(
        long,
        value_name = "HEX",
        env = "SIWX_PRIVATE_KEY",
        hide_env_values = true
    )]
    private_key: Option<String>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(header) => {
            println!("{header}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("siwx-proof: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<String, String> {
    let text = match &args.extension {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            text
        }
    };
    let extension: Value =
        serde_json::from_str(&text).map_err(|e| format!("the extension is not JSON: {e}"))?;
    let key = args.private_key.as_deref().unwrap_or(FIXED_PRIVATE_KEY);
    let wallet = Wallet::from_private_key_hex(key).map_err(|e| format!("private key: {e}"))?;
    wallet
        .sign_in(&extension)
        .map_err(|e| format!("cannot sign in: {e}"))
}
