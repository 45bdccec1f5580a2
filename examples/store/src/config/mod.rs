//! Settings: every one a command-line flag that can also come from a `STORE_…` variable.
//!
//! [`Config`] is the one struct: clap parses it, each field naming its flag, its variable, its
//! default and its value parser — a plain `fn(&str) -> Result<T, String>` from this module such
//! as [`seconds`] or [`positive`]. Each value is named after its variable, so that clap's
//! refusal names both the flag and the variable: `invalid value 'x' for '--base-url
//! <STORE_BASE_URL>': …`. [`Config::checked`] then checks what clap would echo in its refusal
//! (secrets, a database URL's password) and the rules that combine settings (live mode needs
//! `STORE_PAY_TO`), and fills in the settings whose default depends on others.
//!
//! A new setting is a field of [`Config`], set in [`Config::for_tests`] and shown by its `Debug`.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use reqwest::Url;

use crate::discovery::channels::ChannelSpec;

mod debug;
mod values;
use crate::serve::ServeLimits;
use crate::storage::{Engine, without_password};
pub use values::*;

/// The canonical receiving address in demo mode (no external facilitator): a well-formed EVM
/// address that only the in-process sandbox ever "pays". Live mode requires `STORE_PAY_TO`.
pub const DEMO_PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The Solana receiving address in demo mode when `STORE_SECOND_PAY_TO` is unset: a
/// well-formed Solana address that only the in-process sandbox ever "pays", so the Solana door
/// is live with no setup.
pub const DEMO_SECOND_PAY_TO: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";

/// The checked settings the store runs with: what clap parses from the command line and the
/// environment, then [`Config::checked`].
#[derive(Clone, Parser)]
#[command(
    name = "store",
    version,
    about = "A digital store whose products are paid over HTTP 402 (x402 v2, USDC)",
    long_about = "A digital store whose products are paid over HTTP 402 (x402 v2, USDC).\n\n\
                  Every flag can also be set through the environment variable its value is \
                  named after; a flag on the command line wins over its variable.",
    mut_args = named_after_its_variable
)]
pub struct Config {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "STORE_LISTEN", default_value = "127.0.0.1:4020")]
    pub listen: SocketAddr,
    /// Public origin of the store, e.g. `https://shop.example`, kept without trailing slashes
    /// (unset or empty: `http://` + the bound address).
    #[arg(long, env = "STORE_BASE_URL", value_parser = base_url, default_value = "", hide_default_value = true)]
    pub base_url: String,
    /// Prefix of every SKU slug (`<prefix>-rail-receipt`, …).
    #[arg(long, env = "STORE_SLUG_PREFIX", default_value = "store", value_parser = slug_prefix)]
    pub slug_prefix: String,
    /// Receiving address on Base (required with `--facilitator-url`; in demo mode a sandbox
    /// address).
    #[arg(long, env = "STORE_PAY_TO", value_parser = evm_address, default_value = "", hide_default_value = true)]
    pub pay_to: String,
    /// External facilitators, comma-separated in order of preference; without it the store runs
    /// in demo mode with the in-process sandbox.
    #[arg(long, env = "STORE_FACILITATOR_URL", value_parser = facilitator_urls)]
    pub facilitator_url: Option<String>,
    /// Bearer tokens sent to the external facilitators, comma-separated and matched by
    /// position; a single one is sent to all.
    #[arg(long, env = "STORE_FACILITATOR_BEARER", hide_env_values = true)]
    pub facilitator_bearer: Option<String>,
    /// Consecutive transport failures that open a facilitator's circuit breaker.
    #[arg(long, env = "STORE_FACILITATOR_BREAKER_FAILURES", default_value = "3", value_parser = positive::<u32>)]
    pub facilitator_breaker_failures: u32,
    /// Seconds an open facilitator breaker waits before one trial request.
    #[arg(long = "facilitator-breaker-pause-secs", env = "STORE_FACILITATOR_BREAKER_PAUSE_SECS", default_value = "30", value_parser = seconds)]
    pub facilitator_breaker_pause: Duration,
    /// Sends `/verify` before `/settle` (the store settles before it delivers): for a
    /// facilitator whose `/settle` does not verify the payment itself. Off: one round trip.
    #[arg(long, env = "STORE_VERIFY_BEFORE_SETTLING")]
    pub verify_before_settling: bool,
    /// The database: `sqlite://PATH` (its directory is created if missing) or `postgres://…`
    /// (an existing database that several instances may share).
    #[arg(
        long,
        env = "STORE_DATABASE_URL",
        default_value = "sqlite://data/store.db"
    )]
    pub database_url: String,
    /// Seconds a request waits for a database connection (and, on SQLite, for another writer)
    /// before it fails with a 503: an unreachable database is reported quickly, well within a
    /// client's own timeout.
    #[arg(long = "database-timeout-secs", env = "STORE_DATABASE_TIMEOUT_SECS", default_value = "2", value_parser = seconds)]
    pub database_timeout: Duration,
    /// Deposit address on Solana mainnet; opens the second payment door.
    #[arg(long, env = "STORE_SECOND_PAY_TO", value_parser = solana_address)]
    pub second_pay_to: Option<String>,
    /// Deposit address on Algorand mainnet; opens the third door if the facilitator lists Algorand.
    #[arg(long, env = "STORE_THIRD_PAY_TO", value_parser = algorand_address)]
    pub third_pay_to: Option<String>,
    /// Hosted human checkout page; `{sku}` is replaced by the slug.
    #[arg(long, env = "STORE_CHECKOUT_URL", value_parser = checkout_url)]
    pub checkout_url: Option<String>,
    /// Web origins allowed to pay from a page (comma-separated, e.g. `https://shop.example`);
    /// any origin when unset or empty.
    #[arg(long, env = "STORE_CORS_ORIGINS", value_delimiter = ',', value_parser = cors_origin)]
    pub cors_origins: Vec<String>,
    /// Directory holding the deliverable files.
    #[arg(long, env = "STORE_CONTENT_DIR", value_parser = directory)]
    pub content_dir: Option<PathBuf>,
    /// JSON file listing the discovery channels (default: the built-in list).
    #[arg(long, env = "STORE_DISCOVERY_CHANNELS", value_parser = channel_list)]
    pub discovery_channels: Option<ChannelList>,
    /// Ethereum JSON-RPC endpoint of Base, used to reconcile payments whose settlement outcome
    /// was lost (in doubt). Unset with an external facilitator: they stay in doubt (503) and are
    /// logged for settling by hand. In demo mode the sandbox reconciles.
    #[arg(long, env = "STORE_RPC_URL", value_parser = http_url)]
    pub rpc_url: Option<String>,
    /// Solana JSON-RPC endpoint, used to reconcile Solana payments whose settlement outcome was
    /// lost (in doubt): the transfer is looked for among the payer's signatures. Unset with an
    /// external facilitator: they stay in doubt (503). In demo mode the sandbox reconciles.
    #[arg(long, env = "STORE_SOLANA_RPC_URL", value_parser = http_url)]
    pub solana_rpc_url: Option<String>,
    /// Seconds a store process holds a payment it is settling before another (or a restarted
    /// one) may recover it; longer than the facilitator's settle timeout (60 s).
    #[arg(long, env = "STORE_SETTLEMENT_LEASE", default_value = "120", value_parser = positive::<u64>)]
    pub settlement_lease: u64,
    /// Header, request and connection limits of the server.
    #[command(flatten)]
    pub limits: ServeLimits,
    /// Secret (at least 32 characters) from which each order's fulfillment key is derived, so a
    /// re-delivery hands out the same key (default: one generated once and kept in the database,
    /// shared by every instance and kept across restarts).
    #[arg(long, env = "STORE_FULFILLMENT_SECRET", hide_env_values = true, value_parser = secret)]
    pub fulfillment_secret: Option<Secret>,
    /// Seconds after settlement during which the same PAYMENT-SIGNATURE re-delivers the purchase.
    #[arg(long = "redelivery-window-secs", env = "STORE_REDELIVERY_WINDOW_SECS", default_value = "604800", value_parser = whole_seconds)]
    pub redelivery_window: Duration,
    /// Seconds after a purchase during which its buyer may sign in with the same wallet
    /// (sign-in-with-x) and get it again without paying; 0: for ever.
    #[arg(long = "siwx-entitlement-secs", env = "STORE_SIWX_ENTITLEMENT_SECS", default_value = "31536000", value_parser = seconds_or_for_ever)]
    pub siwx_entitlement: Lifetime,
    /// Address of the operator's endpoints: `/metrics` (Prometheus), `/healthz`, `/readyz`
    /// (unset: not served). Keep it off the public network.
    #[arg(long, env = "STORE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Adds to every SKU's 402, beside its EIP-3009 accept on Base USDC, an `exact` accept on
    /// Base USDC paid through Permit2 (same amount and `payTo`), and declares the
    /// `eip2612GasSponsoring` extension: a buyer with no Permit2 allowance pays in one request.
    #[arg(long, env = "STORE_PERMIT2", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub permit2: bool,
    /// Seconds the requests in progress (a payment being settled) have to finish after SIGTERM
    /// before the process exits anyway.
    #[arg(long = "shutdown-grace-secs", env = "STORE_SHUTDOWN_GRACE_SECS", default_value = "30", value_parser = seconds)]
    pub shutdown_grace: Duration,
}

/// `arg` with its value named after its environment variable (`--listen <STORE_LISTEN>`), in
/// `--help` and in clap's refusals alike.
fn named_after_its_variable(arg: clap::Arg) -> clap::Arg {
    match arg.get_env().and_then(OsStr::to_str).map(str::to_owned) {
        Some(variable) => arg.value_name(variable),
        None => arg,
    }
}

/// The discovery channels read from `STORE_DISCOVERY_CHANNELS` (a name of its own, so clap takes
/// the file as one value rather than a list of values).
pub type ChannelList = Vec<ChannelSpec>;

/// The fulfillment secret's bytes (a name of its own, so clap takes it as one value).
pub type Secret = Vec<u8>;

/// How long something lasts, `None` for ever (a name of its own, so clap reads `0` as for ever
/// rather than taking the setting as optional).
pub type Lifetime = Option<Duration>;

/// Settings that cannot be used together, named the way the operator set them.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct ConfigError {
    /// The environment variable (and flag) at fault.
    pub setting: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl Config {
    /// Checks the settings whose refusal must not show their value (clap's refusal would echo
    /// it), and the rules that combine settings (live mode, `STORE_FACILITATOR_URL`, needs
    /// `STORE_PAY_TO`); fills in the settings left empty whose default depends on others.
    ///
    /// # Errors
    ///
    /// A database URL that is neither `sqlite:` nor `postgres://`, a blank bearer token, a
    /// fulfillment secret under 32 characters, `STORE_FACILITATOR_URL` without `STORE_PAY_TO`,
    /// or a number of bearer tokens that matches neither one nor every facilitator.
    pub fn checked(mut self) -> Result<Self, ConfigError> {
        let refuse = |setting, problem: String| Err(ConfigError { setting, problem });
        if Engine::of(&self.database_url).is_none() {
            let shown = without_password(&self.database_url);
            let problem = format!("`{shown}` is neither a sqlite: nor a postgres:// URL");
            return refuse("STORE_DATABASE_URL (--database-url)", problem);
        }
        let bearer = "STORE_FACILITATOR_BEARER (--facilitator-bearer)";
        if let Some(bearers) = &self.facilitator_bearer {
            if bearers.trim().is_empty() {
                return refuse(bearer, "is empty".to_owned());
            }
            if let Some(urls) = &self.facilitator_url {
                let (urls, bearers) = (urls.split(',').count(), bearers.split(',').count());
                if bearers != 1 && bearers != urls {
                    let problem = format!(
                        "{bearers} tokens for {urls} facilitators: give one token for all, or one per facilitator in the same order"
                    );
                    return refuse(bearer, problem);
                }
            }
        }
        if self
            .fulfillment_secret
            .as_ref()
            .is_some_and(|secret| secret.len() < 32)
        {
            let problem = "must be at least 32 characters".to_owned();
            return refuse("STORE_FULFILLMENT_SECRET (--fulfillment-secret)", problem);
        }
        if self.pay_to.is_empty() {
            if self.facilitator_url.is_some() {
                let problem = "required when STORE_FACILITATOR_URL is set: real payments need your own receiving address";
                return refuse("STORE_PAY_TO (--pay-to)", problem.to_owned());
            }
            DEMO_PAY_TO.clone_into(&mut self.pay_to);
        }
        if self.base_url.is_empty() {
            self.base_url = format!("http://{}", self.listen);
        }
        self.cors_origins.retain(|origin| !origin.is_empty());
        Ok(self)
    }

    /// Demo-mode settings for tests: base URL `http://127.0.0.1:4020`, the given database, no
    /// optional doors, no checkout, the built-in discovery channels; the environment is not read.
    pub fn for_tests(database_url: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 4020)),
            base_url: "http://127.0.0.1:4020".to_owned(),
            slug_prefix: "store".to_owned(),
            pay_to: DEMO_PAY_TO.to_owned(),
            facilitator_url: None,
            facilitator_bearer: None,
            facilitator_breaker_failures: 3,
            facilitator_breaker_pause: Duration::from_secs(30),
            verify_before_settling: false,
            database_url: database_url.into(),
            database_timeout: crate::storage::DEFAULT_TIMEOUT,
            second_pay_to: None,
            third_pay_to: None,
            checkout_url: None,
            cors_origins: Vec::new(),
            content_dir: None,
            discovery_channels: None,
            rpc_url: None,
            solana_rpc_url: None,
            settlement_lease: 120,
            limits: ServeLimits::default(),
            fulfillment_secret: None,
            redelivery_window: Duration::from_secs(7 * 24 * 3600),
            siwx_entitlement: Some(Duration::from_secs(365 * 24 * 3600)),
            metrics_listen: None,
            permit2: false,
            shutdown_grace: Duration::from_secs(30),
        }
    }

    /// The settings demo mode adds to these: the in-process sandbox settles Solana too, so the
    /// Solana door opens on [`DEMO_SECOND_PAY_TO`] unless a deposit address is set.
    pub fn open_demo_doors(&mut self) {
        self.second_pay_to
            .get_or_insert_with(|| DEMO_SECOND_PAY_TO.to_owned());
    }

    /// `scheme://host[:port]` of the base URL: what the store announces as its own.
    pub fn origin(&self) -> String {
        Url::parse(&self.base_url)
            .map(|url| url.origin().ascii_serialization())
            .unwrap_or_else(|_| self.base_url.clone())
    }

    /// The hosted checkout link for `slug`, when a checkout page is configured.
    pub fn checkout_link(&self, slug: &str) -> Option<String> {
        self.checkout_url
            .as_ref()
            .map(|template| template.replace("{sku}", slug))
    }

    /// The external facilitators' base URLs, in order of preference, each with its bearer token.
    pub fn facilitators(&self) -> Vec<(&str, Option<&str>)> {
        let Some(urls) = &self.facilitator_url else {
            return Vec::new();
        };
        let bearers: Vec<&str> = self
            .facilitator_bearer
            .as_deref()
            .map(|bearers| bearers.split(',').map(str::trim).collect())
            .unwrap_or_default();
        // One token is sent to all; otherwise the token at the facilitator's position.
        let position = |index| if bearers.len() == 1 { 0 } else { index };
        let bearer = |index| bearers.get(position(index)).copied();
        urls.split(',')
            .enumerate()
            .map(|(index, url)| (url, bearer(index)))
            .collect()
    }

    /// Whether payments go through the in-process sandbox rather than an external facilitator.
    pub fn is_demo(&self) -> bool {
        self.facilitator_url.is_none()
    }
}

#[cfg(test)]
mod tests;
