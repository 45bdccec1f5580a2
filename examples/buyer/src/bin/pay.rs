//! Buys an x402-protected URL with a sandbox wallet.
//!
//! ```text
//! cargo run -p x402-buyer --bin pay -- http://127.0.0.1:4020/api/x402/store-rail-receipt
//! cargo run -p x402-buyer --bin pay -- http://127.0.0.1:3402/report --header X-REFERRER-PASSPORT:abc
//! cargo run -p x402-buyer --bin pay -- http://127.0.0.1:3402/gen --data '{"prompt":"a"}'
//! cargo run -p x402-buyer --bin pay -- --network solana http://127.0.0.1:4020/api/x402/store-rail-receipt
//! ```
//!
//! GETs the URL (POSTs `--data`, when given: the payment buys that body); on a 402 it decodes the `PAYMENT-REQUIRED` challenge, signs a payment for the
//! first accept it can pay (an EIP-3009 authorization for `exact`, a Permit2 permit to the
//! `exact` proxy for an `exact` accept with `extra.assetTransferMethod: "permit2"`, a Permit2
//! permit of the maximum for `upto`), and repeats the request with `PAYMENT-SIGNATURE`. It prints the final
//! status, the decoded `PAYMENT-RESPONSE` (pretty JSON) and the body on stdout, what was
//! charged on stderr — for an `upto` route the amount the server settled beside the maximum
//! that was signed — and exits non-zero when anything fails. A 503 to the paid request is
//! retried with the same payment (`--retries`, default 3, after `Retry-After`).
//!
//! `--network` restricts the accepts to one network: `base` (Base or Base Sepolia), `solana`
//! (any Solana network: the payment is a Solana `exact` transaction, see [`SolanaWallet`]), or a
//! CAIP-2 id. On Solana the transaction's blockhash comes from `--solana-rpc` (its
//! `getLatestBlockhash`); without it a random one is used, which only a facilitator with no
//! chain (the sandbox) accepts.
//!
//! The payer key comes from `PAYER_PRIVATE_KEY` (64 hex digits; `PAYER_SOLANA_PRIVATE_KEY` on
//! Solana, an ed25519 secret key); without it a random wallet is created and its address
//! printed. The signatures are real, but the wallet's funds exist only in
//! the sandbox ledger: point it at a server whose facilitator is the sandboxed one (the example
//! store, `metered` and `paywall_demo` run it in process by default).

use std::env;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use http::{HeaderName, HeaderValue};
use x402_buyer::{SolanaWallet, Wallet};
use x402_wire::{
    AtomicAmount, PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentRequired,
    PaymentRequirements, SettleResponse, UPTO_SCHEME, UsdAmount, UsdcDeployment, header,
};

/// Pays for an x402-protected URL with a sandbox wallet and prints what came back.
#[derive(Debug, Parser)]
#[command(
    name = "pay",
    after_help = "PAYER_PRIVATE_KEY (64 hex digits) chooses the wallet, PAYER_SOLANA_PRIVATE_KEY the Solana one; without it a random one is made."
)]
struct Args {
    /// The URL to GET.
    url: String,
    /// Pay on this network only: `base` (Base or Base Sepolia), `solana` (any Solana network), or
    /// a CAIP-2 id (`eip155:84532`, `solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1`).
    #[arg(long, value_name = "NETWORK")]
    network: Option<String>,
    /// A Solana JSON-RPC endpoint whose `getLatestBlockhash` the Solana transaction is built
    /// under (the sandbox facilitator serves one at `/rpc/solana`); without it a random
    /// blockhash, which only a facilitator with no chain accepts.
    #[arg(long, value_name = "URL")]
    solana_rpc: Option<String>,
    /// POST this body instead of a GET (send `-H content-type:…` for its type). A payment buys
    /// one request, its body included: the same payment sent again with another body is refused.
    #[arg(short = 'd', long, value_name = "BODY")]
    data: Option<String>,
    /// An extra request header; repeat for more.
    #[arg(short = 'H', long = "header", value_name = "NAME:VALUE", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Retries of the same payment when the paid request is answered 503 (after its
    /// `Retry-After`): the server is asking for the same `PAYMENT-SIGNATURE` again.
    #[arg(long, value_name = "N", default_value_t = 3)]
    retries: u32,
    /// How long to wait for each answer before hanging up, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    timeout: u64,
    /// Write the `PAYMENT-SIGNATURE` value to this file before sending it, so that the same
    /// payment can be sent again by hand (`curl -H "PAYMENT-SIGNATURE: $(cat FILE)" URL`).
    #[arg(long, value_name = "FILE")]
    save_signature: Option<std::path::PathBuf>,
}

fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not NAME:VALUE"))?;
    let name =
        HeaderName::try_from(name.trim()).map_err(|e| format!("header name `{name}`: {e}"))?;
    let value =
        HeaderValue::try_from(value.trim()).map_err(|e| format!("header value for {name}: {e}"))?;
    Ok((name, value))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pay: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let solana = args
        .network
        .as_deref()
        .is_some_and(|network| network == "solana" || network.starts_with("solana:"));
    let payer = if solana {
        Payer::Solana(solana_wallet()?)
    } else {
        Payer::Evm(wallet()?)
    };
    // Every status is an answer to print, not an error; the timeout covers each whole exchange.
    let client: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(args.timeout)))
        .http_status_as_error(false)
        .build()
        .into();
    let method = if args.data.is_some() { "POST" } else { "GET" };
    // The request, with the extra headers and `payment`, if any.
    let send = |payment: Option<&HeaderValue>| {
        let headers = args
            .headers
            .iter()
            .cloned()
            .chain(payment.map(|payment| (PAYMENT_SIGNATURE, payment.clone())));
        match &args.data {
            Some(data) => headers
                .fold(client.post(&args.url), |request, (name, value)| {
                    request.header(name, value)
                })
                .send(data.as_str()),
            None => headers
                .fold(client.get(&args.url), |request, (name, value)| {
                    request.header(name, value)
                })
                .call(),
        }
    };

    let first = send(None).map_err(|e| format!("{method} {}: {}", args.url, causes(&e)))?;
    if first.status() != http::StatusCode::PAYMENT_REQUIRED {
        let status = first.status();
        eprintln!("no payment asked: the server answered {status} without a 402");
        println!("{status}");
        println!("{}", text(first)?);
        return if status.is_success() {
            Ok(())
        } else {
            Err(format!("the request failed with {status}"))
        };
    }

    let challenge = first
        .headers()
        .get(PAYMENT_REQUIRED)
        .ok_or("the server answered 402 without a PAYMENT-REQUIRED header")?;
    let mut required: PaymentRequired = header::decode(challenge.as_bytes())
        .map_err(|e| format!("the PAYMENT-REQUIRED header: {e}"))?;
    if let Some(network) = &args.network {
        let offered: Vec<String> = required
            .accepts
            .iter()
            .map(|accept| accept.network.to_string())
            .collect();
        required
            .accepts
            .retain(|accept| on_network(network, accept.network.as_str()));
        if required.accepts.is_empty() {
            return Err(format!(
                "no accept on {network}: the server offers {}",
                offered.join(", ")
            ));
        }
    }
    let payment = match &payer {
        Payer::Evm(wallet) => wallet.pay(&required),
        Payer::Solana(wallet) => {
            wallet.pay(&required, blockhash(&client, args.solana_rpc.as_deref())?)
        }
    }
    .map_err(|e| format!("cannot pay {}: {e}", required.resource.url))?;
    let accepted = &payment.accepted;
    let up_to = if accepted.scheme == UPTO_SCHEME {
        "up to "
    } else {
        ""
    };
    eprintln!(
        "paying {up_to}{} on {} to {}",
        amount(accepted, accepted.amount),
        accepted.network,
        accepted.pay_to
    );
    let signature = header::encode(&payment).map_err(|e| format!("encoding the payment: {e}"))?;
    if let Some(path) = &args.save_signature {
        std::fs::write(path, signature.as_bytes())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }

    let mut attempt = 0;
    let paid = loop {
        let paid = send(Some(&signature))
            .map_err(|e| format!("paid {method} {}: {}", args.url, causes(&e)))?;
        if paid.status() != http::StatusCode::SERVICE_UNAVAILABLE || attempt == args.retries {
            break paid;
        }
        attempt += 1;
        let wait = paid
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(1)
            .min(60);
        let body = text(paid).unwrap_or_default();
        eprintln!(
            "503 {body}\nretrying the same payment in {wait} s (retry {attempt} of {})",
            args.retries
        );
        std::thread::sleep(Duration::from_secs(wait));
    };
    let status = paid.status();
    println!("{status}");
    let settlement = match paid.headers().get(PAYMENT_RESPONSE) {
        Some(value) => {
            let settlement: SettleResponse = header::decode(value.as_bytes())
                .map_err(|e| format!("the PAYMENT-RESPONSE header: {e}"))?;
            let pretty = serde_json::to_string_pretty(&settlement)
                .map_err(|e| format!("printing PAYMENT-RESPONSE: {e}"))?;
            println!("{pretty}");
            if settlement.success {
                eprintln!("{}", charged(&payment.accepted, &settlement));
            }
            Some(settlement)
        }
        None => {
            println!("(no PAYMENT-RESPONSE header)");
            None
        }
    };
    println!("{}", text(paid)?);

    match settlement {
        _ if !status.is_success() => Err(format!("the paid request was answered {status}")),
        Some(settlement) if !settlement.success => Err(format!(
            "settlement failed: {}",
            settlement
                .error_reason
                .as_deref()
                .unwrap_or("no reason given")
        )),
        _ => Ok(()),
    }
}

/// `amount` of `requirement`'s asset: in USDC when the asset is a known USDC deployment, with
/// the atomic units beside it; in atomic units of the asset otherwise.
fn amount(requirement: &PaymentRequirements, amount: AtomicAmount) -> String {
    let usdc = UsdcDeployment::ALL.iter().find(|usdc| {
        usdc.network == requirement.network && usdc.asset.eq_ignore_ascii_case(&requirement.asset)
    });
    match usdc.and_then(|usdc| UsdAmount::from_atomic(amount, usdc.decimals).ok()) {
        Some(dollars) => format!("{dollars} USDC ({amount} atomic units)"),
        None => format!("{amount} atomic units of {}", requirement.asset),
    }
}

/// What a successful settlement charged. For `upto`, the amount the server settled (its
/// `PAYMENT-RESPONSE` `amount`; zero sends no transaction) and the maximum that was signed.
fn charged(accepted: &PaymentRequirements, settlement: &SettleResponse) -> String {
    let charged = settlement.amount.unwrap_or(accepted.amount);
    if accepted.scheme == UPTO_SCHEME {
        format!(
            "charged {} of the {} signed",
            amount(accepted, charged),
            amount(accepted, accepted.amount)
        )
    } else {
        format!("charged {}", amount(accepted, charged))
    }
}

/// The body of `response` as text, any bytes that are not UTF-8 replaced.
fn text(response: http::Response<ureq::Body>) -> Result<String, String> {
    let bytes = response
        .into_body()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .map_err(|e| format!("reading the body: {}", causes(&e)))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `error` and its sources, `: `-separated (the useful part is often in the sources).
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Who pays: an EVM wallet, or a Solana one (`--network solana`).
enum Payer {
    Evm(Wallet),
    Solana(SolanaWallet),
}

/// Whether an accept on `accepted` (a CAIP-2 id) is on `wanted` (`base`, `solana` or a CAIP-2
/// id).
fn on_network(wanted: &str, accepted: &str) -> bool {
    match wanted {
        "base" => matches!(accepted, "eip155:8453" | "eip155:84532"),
        "solana" => accepted.starts_with("solana:"),
        caip2 => accepted == caip2,
    }
}

/// The blockhash a Solana transaction is built under: `getLatestBlockhash` of `rpc`, or random.
fn blockhash(client: &ureq::Agent, rpc: Option<&str>) -> Result<[u8; 32], String> {
    let Some(rpc) = rpc else {
        let mut random = [0u8; 32];
        getrandom::fill(&mut random).map_err(|e| format!("no random blockhash: {e}"))?;
        return Ok(random);
    };
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"getLatestBlockhash","params":[{"commitment":"finalized"}]}"#;
    let response = client
        .post(rpc)
        .header("content-type", "application/json")
        .send(body)
        .map_err(|e| format!("getLatestBlockhash at {rpc}: {}", causes(&e)))?;
    let answer: serde_json::Value = serde_json::from_str(&text(response)?)
        .map_err(|e| format!("getLatestBlockhash at {rpc}: not JSON: {e}"))?;
    let hash = answer["result"]["value"]["blockhash"]
        .as_str()
        .ok_or_else(|| format!("getLatestBlockhash at {rpc} answered no blockhash: {answer}"))?;
    hash.parse::<tower_x402_solana::Pubkey>()
        .map(|hash| hash.0)
        .map_err(|_| format!("getLatestBlockhash at {rpc}: `{hash}` is not a blockhash"))
}

/// The Solana wallet from `PAYER_SOLANA_PRIVATE_KEY`, or a new random one.
fn solana_wallet() -> Result<SolanaWallet, String> {
    match env::var("PAYER_SOLANA_PRIVATE_KEY") {
        Ok(key) => {
            let wallet = SolanaWallet::from_private_key_hex(&key)
                .map_err(|e| format!("PAYER_SOLANA_PRIVATE_KEY: {e}"))?;
            eprintln!("payer {} (from PAYER_SOLANA_PRIVATE_KEY)", wallet.address());
            Ok(wallet)
        }
        Err(env::VarError::NotPresent) => {
            let wallet =
                SolanaWallet::random().map_err(|e| format!("cannot create a wallet: {e}"))?;
            eprintln!(
                "payer {} (new random Solana wallet; set PAYER_SOLANA_PRIVATE_KEY to reuse one)",
                wallet.address()
            );
            Ok(wallet)
        }
        Err(env::VarError::NotUnicode(_)) => {
            Err("PAYER_SOLANA_PRIVATE_KEY is not valid UTF-8".into())
        }
    }
}

/// The wallet from `PAYER_PRIVATE_KEY`, or a new random one.
fn wallet() -> Result<Wallet, String> {
    match env::var("PAYER_PRIVATE_KEY") {
        Ok(key) => {
            let wallet = Wallet::from_private_key_hex(&key)
                .map_err(|e| format!("PAYER_PRIVATE_KEY: {e}"))?;
            eprintln!("payer {} (from PAYER_PRIVATE_KEY)", wallet.address());
            Ok(wallet)
        }
        Err(env::VarError::NotPresent) => {
            let wallet = Wallet::random().map_err(|e| format!("cannot create a wallet: {e}"))?;
            eprintln!(
                "payer {} (new random wallet; set PAYER_PRIVATE_KEY to reuse one)",
                wallet.address()
            );
            Ok(wallet)
        }
        Err(env::VarError::NotUnicode(_)) => Err("PAYER_PRIVATE_KEY is not valid UTF-8".into()),
    }
}
