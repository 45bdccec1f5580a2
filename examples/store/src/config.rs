//! Settings: every one a command-line flag that can also come from a `STORE_…` variable.
//!
//! [`Args`] is what clap parses; [`Config::from_args`] checks it and fills in the defaults, so
//! that a bad setting stops start-up with one message naming it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use reqwest::Url;

use crate::discovery::ChannelSpec;
use crate::serve::ServeLimits;

/// The canonical receiving address in demo mode (no external facilitator): a well-formed EVM
/// address that only the in-process sandbox ever "pays". Live mode requires `STORE_PAY_TO`.
pub const DEMO_PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The command line (each flag also reads its `STORE_…` environment variable).
#[derive(Parser)]
#[command(
    name = "store",
    version,
    about = "A digital store whose products are paid over HTTP 402 (x402 v2, USDC)"
)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "STORE_LISTEN", default_value = "127.0.0.1:4020")]
    pub listen: SocketAddr,
    /// Public origin of the store, e.g. `https://shop.example` (default: `http://` + the bound address).
    #[arg(long, env = "STORE_BASE_URL")]
    pub base_url: Option<String>,
    /// Prefix of every SKU slug (`<prefix>-rail-receipt`, …).
    #[arg(long, env = "STORE_SLUG_PREFIX", default_value = "store")]
    pub slug_prefix: String,
    /// Receiving address on Base (required with `--facilitator-url`).
    #[arg(long, env = "STORE_PAY_TO")]
    pub pay_to: Option<String>,
    /// External facilitator; without it the store runs in demo mode with the in-process sandbox.
    #[arg(long, env = "STORE_FACILITATOR_URL")]
    pub facilitator_url: Option<String>,
    /// Bearer token sent to the external facilitator.
    #[arg(long, env = "STORE_FACILITATOR_BEARER", hide_env_values = true)]
    pub facilitator_bearer: Option<String>,
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
    #[arg(
        long,
        env = "STORE_DATABASE_TIMEOUT_SECS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub database_timeout_secs: u64,
    /// Deposit address on Solana mainnet; opens the second payment door.
    #[arg(long, env = "STORE_SECOND_PAY_TO")]
    pub second_pay_to: Option<String>,
    /// Deposit address on Algorand mainnet; opens the third door if the facilitator lists Algorand.
    #[arg(long, env = "STORE_THIRD_PAY_TO")]
    pub third_pay_to: Option<String>,
    /// Hosted human checkout page; `{sku}` is replaced by the slug.
    #[arg(long, env = "STORE_CHECKOUT_URL")]
    pub checkout_url: Option<String>,
    /// Web origins allowed to pay from a page (comma-separated, e.g. `https://shop.example`);
    /// any origin when unset.
    #[arg(long, env = "STORE_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Directory holding the deliverable files.
    #[arg(long, env = "STORE_CONTENT_DIR")]
    pub content_dir: Option<PathBuf>,
    /// JSON file listing the discovery channels (default: the built-in list).
    #[arg(long, env = "STORE_DISCOVERY_CHANNELS")]
    pub discovery_channels: Option<PathBuf>,
    /// Ethereum JSON-RPC endpoint of Base, used to reconcile payments whose settlement outcome
    /// was lost (in doubt). Unset with an external facilitator: they stay in doubt (503) and are
    /// logged for settling by hand. In demo mode the sandbox reconciles.
    #[arg(long, env = "STORE_RPC_URL")]
    pub rpc_url: Option<String>,
    /// Seconds a store process holds a payment it is settling before another (or a restarted
    /// one) may recover it; longer than the facilitator's settle timeout (60 s).
    #[arg(long, env = "STORE_SETTLEMENT_LEASE", default_value_t = 120)]
    pub settlement_lease: u64,
    /// Seconds a client has to send a request's headers (also closes an idle keep-alive connection).
    #[arg(long, env = "STORE_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub header_read_timeout_secs: u64,
    /// Seconds a new connection has to send its first bytes before it is closed.
    #[arg(
        long,
        env = "STORE_FIRST_BYTE_TIMEOUT_SECS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub first_byte_timeout_secs: u64,
    /// Seconds an HTTP/2 connection may stay open with no request in progress (pings do not count).
    #[arg(
        long,
        env = "STORE_HTTP2_IDLE_TIMEOUT_SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub http2_idle_timeout_secs: u64,
    /// Seconds a request on a free route may take before it is answered 408.
    #[arg(long, env = "STORE_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "STORE_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Secret (at least 32 characters) from which each order's fulfillment key is derived, so a
    /// re-delivery hands out the same key (default: one generated once and kept in the database,
    /// shared by every instance and kept across restarts).
    #[arg(long, env = "STORE_FULFILLMENT_SECRET", hide_env_values = true)]
    pub fulfillment_secret: Option<String>,
    /// Seconds after settlement during which the same PAYMENT-SIGNATURE re-delivers the purchase.
    #[arg(long, env = "STORE_REDELIVERY_WINDOW_SECS", default_value_t = 7 * 24 * 3600)]
    pub redelivery_window_secs: u64,
}

/// The checked settings the store runs with.
#[derive(Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Public origin (plus optional path), without a trailing slash.
    pub base_url: String,
    /// Prefix of every slug.
    pub slug_prefix: String,
    /// Receiving address on the canonical network.
    pub pay_to: String,
    /// External facilitator, if any.
    pub facilitator_url: Option<String>,
    /// Bearer token for the external facilitator.
    pub facilitator_bearer: Option<String>,
    /// `sqlite:` or `postgres:` database URL.
    pub database_url: String,
    /// How long a request waits for the database before it fails.
    pub database_timeout: Duration,
    /// Solana deposit address (second door).
    pub second_pay_to: Option<String>,
    /// Algorand deposit address (third door).
    pub third_pay_to: Option<String>,
    /// Hosted checkout URL with a `{sku}` placeholder.
    pub checkout_url: Option<String>,
    /// Origins allowed to pay from a web page; empty means any origin.
    pub cors_origins: Vec<String>,
    /// Directory of deliverable files.
    pub content_dir: Option<PathBuf>,
    /// Discovery channels; `None` means the built-in list.
    pub discovery_channels: Option<Vec<ChannelSpec>>,
    /// Ethereum JSON-RPC endpoint that reconciles payments in doubt.
    pub rpc_url: Option<String>,
    /// How long a payment being settled is held, in seconds.
    pub settlement_lease: u64,
    /// Header, request and connection limits of the server.
    pub limits: ServeLimits,
    /// The secret fulfillment keys are derived from; `None` until start-up reads (or creates)
    /// the one kept in the database, when `STORE_FULFILLMENT_SECRET` is unset.
    pub fulfillment_secret: Option<Vec<u8>>,
    /// How long after settlement a replayed payment re-delivers the purchase.
    pub redelivery_window: Duration,
}

/// A setting that cannot be used, named the way the operator set it.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct ConfigError {
    /// The environment variable (and flag) at fault.
    pub setting: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

fn invalid(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        problem: problem.into(),
    }
}

impl Config {
    /// Checks `args` and fills in the defaults.
    ///
    /// # Errors
    ///
    /// The first setting that cannot be used.
    pub fn from_args(args: Args) -> Result<Self, ConfigError> {
        let discovery_channels = match &args.discovery_channels {
            Some(path) => Some(read_channels(path)?),
            None => None,
        };
        let pay_to = match (args.pay_to, &args.facilitator_url) {
            (Some(pay_to), _) => pay_to,
            (None, None) => DEMO_PAY_TO.to_owned(),
            (None, Some(_)) => {
                return Err(invalid(
                    "STORE_PAY_TO (--pay-to)",
                    "required when STORE_FACILITATOR_URL is set: real payments need your own receiving address",
                ));
            }
        };
        let config = Self {
            listen: args.listen,
            base_url: args
                .base_url
                .unwrap_or_else(|| format!("http://{}", args.listen))
                .trim_end_matches('/')
                .to_owned(),
            slug_prefix: args.slug_prefix,
            pay_to,
            facilitator_url: args
                .facilitator_url
                .map(|url| url.trim_end_matches('/').to_owned()),
            facilitator_bearer: args.facilitator_bearer,
            database_url: args.database_url,
            database_timeout: Duration::from_secs(args.database_timeout_secs),
            second_pay_to: args.second_pay_to,
            third_pay_to: args.third_pay_to,
            checkout_url: args.checkout_url,
            cors_origins: args
                .cors_origins
                .into_iter()
                .map(|origin| origin.trim().trim_end_matches('/').to_owned())
                .filter(|origin| !origin.is_empty())
                .collect(),
            content_dir: args.content_dir,
            discovery_channels,
            rpc_url: args.rpc_url,
            settlement_lease: args.settlement_lease,
            limits: ServeLimits {
                first_byte_timeout: Duration::from_secs(args.first_byte_timeout_secs),
                header_read_timeout: Duration::from_secs(args.header_read_timeout_secs),
                http2_idle_timeout: Duration::from_secs(args.http2_idle_timeout_secs),
                request_timeout: Duration::from_secs(args.request_timeout_secs),
                max_connections: args.max_connections,
            },
            fulfillment_secret: match args.fulfillment_secret {
                Some(secret) if secret.len() < 32 => {
                    return Err(invalid(
                        "STORE_FULFILLMENT_SECRET (--fulfillment-secret)",
                        "must be at least 32 characters",
                    ));
                }
                Some(secret) => Some(secret.into_bytes()),
                None => None,
            },
            redelivery_window: Duration::from_secs(args.redelivery_window_secs),
        };
        config.validate()?;
        Ok(config)
    }

    /// Demo-mode settings for tests: base URL `http://127.0.0.1:4020`, the given database, no
    /// optional doors, no checkout, the built-in discovery channels.
    pub fn for_tests(database_url: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 4020)),
            base_url: "http://127.0.0.1:4020".to_owned(),
            slug_prefix: "store".to_owned(),
            pay_to: DEMO_PAY_TO.to_owned(),
            facilitator_url: None,
            facilitator_bearer: None,
            database_url: database_url.into(),
            database_timeout: crate::storage::DEFAULT_TIMEOUT,
            second_pay_to: None,
            third_pay_to: None,
            checkout_url: None,
            cors_origins: Vec::new(),
            content_dir: None,
            discovery_channels: None,
            rpc_url: None,
            settlement_lease: 120,
            limits: ServeLimits::default(),
            fulfillment_secret: None,
            redelivery_window: Duration::from_secs(7 * 24 * 3600),
        }
    }

    /// Checks every setting.
    ///
    /// # Errors
    ///
    /// The first setting that cannot be used.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let base = http_url("STORE_BASE_URL (--base-url)", &self.base_url)?;
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid(
                "STORE_BASE_URL (--base-url)",
                "must not carry a query or fragment",
            ));
        }
        let limits = &self.limits;
        for (setting, value) in [
            (
                "STORE_DATABASE_TIMEOUT_SECS (--database-timeout-secs)",
                self.database_timeout.as_secs(),
            ),
            (
                "STORE_FIRST_BYTE_TIMEOUT_SECS (--first-byte-timeout-secs)",
                limits.first_byte_timeout.as_secs(),
            ),
            (
                "STORE_HTTP2_IDLE_TIMEOUT_SECS (--http2-idle-timeout-secs)",
                limits.http2_idle_timeout.as_secs(),
            ),
            (
                "STORE_HEADER_READ_TIMEOUT_SECS (--header-read-timeout-secs)",
                limits.header_read_timeout.as_secs(),
            ),
            (
                "STORE_REQUEST_TIMEOUT_SECS (--request-timeout-secs)",
                limits.request_timeout.as_secs(),
            ),
            (
                "STORE_MAX_CONNECTIONS (--max-connections)",
                u64::try_from(limits.max_connections).unwrap_or(u64::MAX),
            ),
        ] {
            if value == 0 {
                return Err(invalid(setting, "must be at least 1"));
            }
        }
        if !is_slug_prefix(&self.slug_prefix) {
            return Err(invalid(
                "STORE_SLUG_PREFIX (--slug-prefix)",
                format!(
                    "`{}` must be 1–32 lowercase letters, digits and inner hyphens",
                    self.slug_prefix
                ),
            ));
        }
        if !is_evm_address(&self.pay_to) {
            return Err(invalid(
                "STORE_PAY_TO (--pay-to)",
                format!(
                    "`{}` is not a Base address (0x followed by 40 hex digits)",
                    self.pay_to
                ),
            ));
        }
        if let Some(url) = &self.facilitator_url {
            http_url("STORE_FACILITATOR_URL (--facilitator-url)", url)?;
        }
        if self
            .facilitator_bearer
            .as_deref()
            .is_some_and(|token| token.trim().is_empty())
        {
            return Err(invalid(
                "STORE_FACILITATOR_BEARER (--facilitator-bearer)",
                "is empty",
            ));
        }
        if crate::storage::Engine::of(&self.database_url).is_none() {
            return Err(invalid(
                "STORE_DATABASE_URL (--database-url)",
                format!(
                    "`{}` is neither a sqlite: nor a postgres:// URL",
                    crate::storage::without_password(&self.database_url)
                ),
            ));
        }
        if let Some(url) = &self.rpc_url {
            http_url("STORE_RPC_URL (--rpc-url)", url)?;
        }
        if self.settlement_lease == 0 {
            return Err(invalid(
                "STORE_SETTLEMENT_LEASE (--settlement-lease)",
                "must be at least 1 second",
            ));
        }
        if let Some(address) = &self.second_pay_to
            && !is_solana_address(address)
        {
            return Err(invalid(
                "STORE_SECOND_PAY_TO (--second-pay-to)",
                format!("`{address}` is not a Solana address (32–44 base58 characters)"),
            ));
        }
        if let Some(address) = &self.third_pay_to
            && !is_algorand_address(address)
        {
            return Err(invalid(
                "STORE_THIRD_PAY_TO (--third-pay-to)",
                format!("`{address}` is not an Algorand address (58 base32 characters A–Z, 2–7)"),
            ));
        }
        if let Some(template) = &self.checkout_url {
            if !template.contains("{sku}") {
                return Err(invalid(
                    "STORE_CHECKOUT_URL (--checkout-url)",
                    "must contain the placeholder {sku}",
                ));
            }
            http_url(
                "STORE_CHECKOUT_URL (--checkout-url)",
                &template.replace("{sku}", "sku"),
            )?;
        }
        for origin in &self.cors_origins {
            http_url("STORE_CORS_ORIGINS (--cors-origins)", origin)?;
        }
        if let Some(dir) = &self.content_dir
            && !dir.is_dir()
        {
            return Err(invalid(
                "STORE_CONTENT_DIR (--content-dir)",
                format!("`{}` is not a directory", dir.display()),
            ));
        }
        if let Some(channels) = &self.discovery_channels {
            for channel in channels {
                channel.validate().map_err(|problem| {
                    invalid("STORE_DISCOVERY_CHANNELS (--discovery-channels)", problem)
                })?;
            }
        }
        Ok(())
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

    /// Whether payments go through the in-process sandbox rather than an external facilitator.
    pub fn is_demo(&self) -> bool {
        self.facilitator_url.is_none()
    }
}

/// Shows the address only: the other arguments include the facilitator's bearer token.
impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Args")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("base_url", &self.base_url)
            .field("slug_prefix", &self.slug_prefix)
            .field("pay_to", &self.pay_to)
            .field("facilitator_url", &self.facilitator_url)
            .field(
                "facilitator_bearer",
                &self.facilitator_bearer.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "database_url",
                &crate::storage::without_password(&self.database_url),
            )
            .field("database_timeout", &self.database_timeout)
            .field("second_pay_to", &self.second_pay_to)
            .field("third_pay_to", &self.third_pay_to)
            .field("checkout_url", &self.checkout_url)
            .field("content_dir", &self.content_dir)
            .field(
                "discovery_channels",
                &self.discovery_channels.as_ref().map(Vec::len),
            )
            // An RPC URL often carries the provider's API key.
            .field("rpc_url", &self.rpc_url.as_ref().map(|_| "<redacted>"))
            .field("settlement_lease", &self.settlement_lease)
            .field("limits", &self.limits)
            .field("fulfillment_secret", &"<redacted>")
            .field("redelivery_window", &self.redelivery_window)
            .finish()
    }
}

fn read_channels(path: &PathBuf) -> Result<Vec<ChannelSpec>, ConfigError> {
    const SETTING: &str = "STORE_DISCOVERY_CHANNELS (--discovery-channels)";
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(SETTING, format!("cannot read `{}`: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        invalid(
            SETTING,
            format!("`{}` is not a channel list: {e}", path.display()),
        )
    })
}

/// Parses `value` as an absolute http(s) URL with a host.
pub fn http_url(setting: &'static str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value)
        .map_err(|e| invalid(setting, format!("`{value}` is not an absolute URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(
            setting,
            format!("`{value}` must be an http(s) URL with a host"),
        ));
    }
    Ok(url)
}

fn is_slug_prefix(prefix: &str) -> bool {
    (1..=32).contains(&prefix.len())
        && !prefix.starts_with('-')
        && !prefix.ends_with('-')
        && !prefix.contains("--")
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `0x` followed by 40 hex digits (any case; the checksum is only a spelling).
pub fn is_evm_address(address: &str) -> bool {
    address
        .strip_prefix("0x")
        .is_some_and(|hex| hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// 32–44 characters of the base58 alphabet (no `0`, `O`, `I`, `l`).
pub fn is_solana_address(address: &str) -> bool {
    (32..=44).contains(&address.len())
        && address
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() && !matches!(b, b'0' | b'O' | b'I' | b'l'))
}

/// 58 characters of the RFC 4648 base32 alphabet (the public key and its checksum; the checksum
/// itself is not recomputed here).
pub fn is_algorand_address(address: &str) -> bool {
    address.len() == 58
        && address
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["store"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn defaults_are_demo_mode() {
        let config = Config::from_args(args(&[])).unwrap();
        assert!(config.is_demo());
        assert_eq!(config.pay_to, DEMO_PAY_TO);
        assert_eq!(config.base_url, "http://127.0.0.1:4020");
        assert_eq!(config.database_url, "sqlite://data/store.db");
        assert_eq!(config.origin(), "http://127.0.0.1:4020");
    }

    #[test]
    fn each_bad_setting_is_named() {
        let cases: &[(&[&str], &str)] = &[
            (&["--facilitator-url", "https://f.example"], "STORE_PAY_TO"),
            (&["--base-url", "shop.example"], "STORE_BASE_URL"),
            (
                &["--base-url", "https://shop.example/?a=1"],
                "STORE_BASE_URL",
            ),
            (&["--base-url", "ftp://shop.example"], "STORE_BASE_URL"),
            (&["--pay-to", "0x1234"], "STORE_PAY_TO"),
            (
                &["--pay-to", "0xZZ9693Bc6afc0C5328bA36FaF03C514EF312287C"],
                "STORE_PAY_TO",
            ),
            (&["--database-url", "mysql://x"], "STORE_DATABASE_URL"),
            (
                &[
                    "--second-pay-to",
                    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                ],
                "STORE_SECOND_PAY_TO",
            ),
            (
                &["--second-pay-to", "O0IlO0IlO0IlO0IlO0IlO0IlO0IlO0IlO0Il"],
                "STORE_SECOND_PAY_TO",
            ),
            (&["--third-pay-to", "abc"], "STORE_THIRD_PAY_TO"),
            (
                &["--checkout-url", "https://pay.example/checkout"],
                "STORE_CHECKOUT_URL",
            ),
            (&["--checkout-url", "/checkout/{sku}"], "STORE_CHECKOUT_URL"),
            (&["--slug-prefix", "Store"], "STORE_SLUG_PREFIX"),
            (
                &["--facilitator-url", "not a url", "--pay-to", DEMO_PAY_TO],
                "STORE_FACILITATOR_URL",
            ),
            (
                &["--content-dir", "/definitely/not/here"],
                "STORE_CONTENT_DIR",
            ),
            (
                &["--discovery-channels", "/definitely/not/here.json"],
                "STORE_DISCOVERY_CHANNELS",
            ),
        ];
        for (argv, setting) in cases {
            let error = Config::from_args(args(argv)).unwrap_err();
            assert!(error.to_string().starts_with(setting), "{argv:?}: {error}");
        }
    }

    #[test]
    fn accepts_well_formed_addresses_and_live_mode() {
        let config = Config::from_args(args(&[
            "--facilitator-url",
            "https://facilitator.example/",
            "--pay-to",
            "0x209693bc6afc0c5328ba36faf03c514ef312287c",
            "--second-pay-to",
            "CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5",
            "--third-pay-to",
            "VCMJKWOY5P5P7SKMZFFOCEROPJCZOTIJMNIYNUCKH7LRO45JMJP6UYBIJA",
            "--checkout-url",
            "https://pay.example/buy?sku={sku}&from=store",
            "--base-url",
            "https://shop.example/",
        ]))
        .unwrap();
        assert!(!config.is_demo());
        assert_eq!(
            config.facilitator_url.as_deref(),
            Some("https://facilitator.example")
        );
        assert_eq!(config.base_url, "https://shop.example");
        assert_eq!(
            config.checkout_link("store-api-pack").as_deref(),
            Some("https://pay.example/buy?sku=store-api-pack&from=store")
        );
    }

    #[test]
    fn new_limits_are_read_and_zero_is_refused() {
        let config = Config::from_args(args(&[
            "--first-byte-timeout-secs",
            "3",
            "--http2-idle-timeout-secs",
            "4",
            "--database-timeout-secs",
            "5",
        ]))
        .unwrap();
        assert_eq!(config.limits.first_byte_timeout, Duration::from_secs(3));
        assert_eq!(config.limits.http2_idle_timeout, Duration::from_secs(4));
        assert_eq!(config.database_timeout, Duration::from_secs(5));
        for flag in [
            "--first-byte-timeout-secs",
            "--http2-idle-timeout-secs",
            "--database-timeout-secs",
        ] {
            assert!(
                Args::try_parse_from(["store", flag, "0"]).is_err(),
                "{flag}"
            );
        }
        assert!(
            Config::from_args(args(&[]))
                .unwrap()
                .fulfillment_secret
                .is_none()
        );
    }

    #[test]
    fn debug_redacts_the_bearer() {
        let mut config = Config::for_tests("sqlite::memory:");
        config.facilitator_bearer = Some("s3cret".into());
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn postgres_urls_are_accepted_and_their_password_never_shown() {
        let config = Config::from_args(args(&[
            "--database-url",
            "postgres://store:pw-s3cret@127.0.0.1/store",
        ]))
        .unwrap();
        assert_eq!(
            crate::storage::Engine::of(&config.database_url),
            Some(crate::storage::Engine::Postgres)
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains("pw-s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://store:***@127.0.0.1/store"),
            "{shown}"
        );
        let refused =
            Config::from_args(args(&["--database-url", "mysql://u:pw-s3cret@127.0.0.1/x"]))
                .unwrap_err()
                .to_string();
        assert!(!refused.contains("pw-s3cret"), "{refused}");
    }
}
