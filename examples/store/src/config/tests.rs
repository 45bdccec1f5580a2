//! The settings' parsing and their refusals.

use clap::error::ErrorKind;

use super::*;

fn args(extra: &[&str]) -> Config {
    let mut argv = vec!["store"];
    argv.extend_from_slice(extra);
    Config::try_parse_from(argv).unwrap()
}

#[test]
fn defaults_are_demo_mode() {
    let config = Config::checked(args(&[])).unwrap();
    assert!(config.is_demo());
    assert_eq!(config.pay_to, DEMO_PAY_TO);
    assert_eq!(config.base_url, "http://127.0.0.1:4020");
    assert_eq!(config.database_url, "sqlite://data/store.db");
    assert_eq!(config.origin(), "http://127.0.0.1:4020");
}

/// Why `extra` cannot start the store: clap's refusal, or `checked`'s.
fn refusal(extra: &[&str]) -> String {
    let mut argv = vec!["store"];
    argv.extend_from_slice(extra);
    match Config::try_parse_from(argv) {
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{error}");
            error.to_string()
        }
        Ok(args) => Config::checked(args).unwrap_err().to_string(),
    }
}

#[test]
fn each_bad_setting_is_named() {
    let cases: &[(&[&str], &str)] = &[
        (&["--listen", "localhost"], "STORE_LISTEN (--listen)"),
        (
            &["--base-url", "shop.example"],
            "STORE_BASE_URL (--base-url)",
        ),
        (
            &["--base-url", "https://shop.example/?a=1"],
            "STORE_BASE_URL (--base-url)",
        ),
        (
            &["--base-url", "ftp://shop.example"],
            "STORE_BASE_URL (--base-url)",
        ),
        (&["--pay-to", "0x1234"], "STORE_PAY_TO (--pay-to)"),
        (
            &["--pay-to", "0xZZ9693Bc6afc0C5328bA36FaF03C514EF312287C"],
            "STORE_PAY_TO (--pay-to)",
        ),
        (
            &["--database-url", "mysql://x"],
            "STORE_DATABASE_URL (--database-url)",
        ),
        (
            &[
                "--second-pay-to",
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            ],
            "STORE_SECOND_PAY_TO (--second-pay-to)",
        ),
        (
            &["--second-pay-to", "O0IlO0IlO0IlO0IlO0IlO0IlO0IlO0IlO0Il"],
            "STORE_SECOND_PAY_TO (--second-pay-to)",
        ),
        (
            &["--third-pay-to", "abc"],
            "STORE_THIRD_PAY_TO (--third-pay-to)",
        ),
        (
            &["--checkout-url", "https://pay.example/checkout"],
            "STORE_CHECKOUT_URL (--checkout-url)",
        ),
        (
            &["--checkout-url", "/checkout/{sku}"],
            "STORE_CHECKOUT_URL (--checkout-url)",
        ),
        (
            &["--slug-prefix", "Store"],
            "STORE_SLUG_PREFIX (--slug-prefix)",
        ),
        (
            &["--facilitator-url", "not a url", "--pay-to", DEMO_PAY_TO],
            "STORE_FACILITATOR_URL (--facilitator-url)",
        ),
        (
            &["--facilitator-bearer", " "],
            "STORE_FACILITATOR_BEARER (--facilitator-bearer)",
        ),
        (
            &["--cors-origins", "https://a.example,b.example"],
            "STORE_CORS_ORIGINS (--cors-origins)",
        ),
        (
            &["--rpc-url", "localhost:8545"],
            "STORE_RPC_URL (--rpc-url)",
        ),
        (
            &["--content-dir", "/definitely/not/here"],
            "STORE_CONTENT_DIR (--content-dir)",
        ),
        (
            &["--discovery-channels", "/definitely/not/here.json"],
            "STORE_DISCOVERY_CHANNELS (--discovery-channels)",
        ),
        (
            &["--settlement-lease", "0"],
            "STORE_SETTLEMENT_LEASE (--settlement-lease)",
        ),
        (
            &["--header-read-timeout-secs", "0"],
            "STORE_HEADER_READ_TIMEOUT_SECS (--header-read-timeout-secs)",
        ),
        (
            &["--request-timeout-secs=-1"],
            "STORE_REQUEST_TIMEOUT_SECS (--request-timeout-secs)",
        ),
        (
            &["--max-connections", "0"],
            "STORE_MAX_CONNECTIONS (--max-connections)",
        ),
        (
            &["--fulfillment-secret", "short"],
            "STORE_FULFILLMENT_SECRET (--fulfillment-secret)",
        ),
        (
            &["--metrics-listen", "localhost"],
            "STORE_METRICS_LISTEN (--metrics-listen)",
        ),
        (
            &["--shutdown-grace-secs", "0"],
            "STORE_SHUTDOWN_GRACE_SECS (--shutdown-grace-secs)",
        ),
        (
            &["--redelivery-window-secs", "a week"],
            "STORE_REDELIVERY_WINDOW_SECS (--redelivery-window-secs)",
        ),
        // The one rule across settings, checked after parsing.
        (
            &["--facilitator-url", "https://f.example"],
            "STORE_PAY_TO (--pay-to)",
        ),
    ];
    for (argv, setting) in cases {
        let refusal = refusal(argv);
        // clap names the flag with its variable; `checked` names the variable, then the flag.
        let (variable, flag) = setting.trim_end_matches(')').split_once(" (").unwrap();
        assert!(
            refusal.contains(&format!("for '{flag} <{variable}>': "))
                || refusal.contains(&format!("{setting}: ")),
            "{argv:?}: {refusal}"
        );
    }
}

#[test]
fn a_refusal_names_the_value_but_never_a_secret() {
    let message = refusal(&["--base-url", "shop.example"]);
    assert!(
        message.contains(
            "invalid value 'shop.example' for '--base-url <STORE_BASE_URL>': not an absolute URL"
        ),
        "{message}"
    );
    let message = refusal(&["--fulfillment-secret", "s3cret-but-short"]);
    assert!(!message.contains("s3cret"), "{message}");
}

#[cfg(unix)]
#[test]
fn a_setting_that_is_not_utf8_is_refused_unechoed() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let secret = OsStr::from_bytes(b"s3cret\xff-not-utf8-but-long-enough-to-be-a-secret");
    let argv = [
        OsStr::new("store"),
        OsStr::new("--fulfillment-secret"),
        secret,
    ];
    let Err(error) = Config::try_parse_from(argv) else {
        panic!("a non-UTF-8 secret was accepted");
    };
    assert_eq!(error.kind(), ErrorKind::InvalidUtf8);
    let message = error.to_string();
    assert!(message.contains("invalid UTF-8"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[test]
fn lists_and_urls_are_normalized() {
    let config = Config::checked(args(&[
        "--cors-origins",
        " https://a.example/ ,,https://b.example",
        "--header-read-timeout-secs",
        "3",
    ]))
    .unwrap();
    assert_eq!(
        config.cors_origins,
        ["https://a.example", "https://b.example"]
    );
    assert_eq!(config.limits.header_read_timeout, Duration::from_secs(3));
    assert_eq!(config.limits.request_timeout, Duration::from_secs(30));
    assert_eq!(config.limits.max_connections, 1024);
    assert_eq!(config.redelivery_window, Duration::from_secs(7 * 24 * 3600));
}

#[test]
fn accepts_well_formed_addresses_and_live_mode() {
    let config = Config::checked(args(&[
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
    let config = Config::checked(args(&[
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
            Config::try_parse_from(["store", flag, "0"]).is_err(),
            "{flag}"
        );
    }
    assert!(
        Config::checked(args(&[]))
            .unwrap()
            .fulfillment_secret
            .is_none()
    );
}

#[test]
fn the_defaults_are_those_of_the_tests_and_of_the_limits() {
    let mut parsed = Config::checked(args(&[])).unwrap();
    assert_eq!(parsed.limits, ServeLimits::default());
    assert_eq!(
        format!("{parsed:?}"),
        format!("{:?}", Config::for_tests("sqlite://data/store.db"))
    );
    assert_eq!(
        Config::checked(args(&["--siwx-entitlement-secs", "0"]))
            .unwrap()
            .siwx_entitlement,
        None
    );
    parsed = Config::checked(args(&["--pay-to", "", "--base-url", ""])).unwrap();
    assert_eq!(
        (parsed.pay_to.as_str(), parsed.base_url.as_str()),
        (DEMO_PAY_TO, "http://127.0.0.1:4020")
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
    let config = Config::checked(args(&[
        "--database-url",
        "postgres://store:pw-s3cret@127.0.0.1/store",
    ]))
    .unwrap();
    assert_eq!(Engine::of(&config.database_url), Some(Engine::Postgres));
    let shown = format!("{config:?}");
    assert!(!shown.contains("pw-s3cret"), "{shown}");
    assert!(
        shown.contains("postgres://store:***@127.0.0.1/store"),
        "{shown}"
    );
    let refused = refusal(&["--database-url", "mysql://u:pw-s3cret@127.0.0.1/x"]);
    assert!(refused.contains("STORE_DATABASE_URL"), "{refused}");
    assert!(!refused.contains("pw-s3cret"), "{refused}");
}

#[test]
fn verify_before_settling_is_off_unless_asked() {
    assert!(!args(&[]).verify_before_settling);
    assert!(args(&["--verify-before-settling"]).verify_before_settling);
}
