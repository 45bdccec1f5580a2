//! The load benchmark: wrk against a bare route, the 402 path and the paid path in both
//! settlement modes, the store's own 402 path and `/.well-known/x402.json`, all served by this
//! process, and optionally the same app behind other x402 middlewares (child processes built
//! from `benches/peers`). Every paid request goes through one stub facilitator (a child process)
//! over loopback HTTP. Run it with `bash benches/load/run.sh`, which installs wrk and builds
//! this in release mode; `x402-load --help` lists the options.
//!
//! Rounds are interleaved (every case of every app, every round) and every ratio pairs a case
//! with the bare route of the same app in the same round, so a machine busy with other work
//! skews both sides alike. tower-x402's app in a process of its own (`--peer NAME=self`) also
//! serves `paid_channel`, paid with payment-channel vouchers (see `channel.rs`), reported beside
//! the peers' `paid`; `run.sh --peers` measures it in a second such process, so that what the
//! vouchers leave in a process's heap does not weigh on the `paid` compared with the peers'.

mod app;
mod channel;
mod child;
mod latency;
mod memory;
mod parts;
mod payment;
mod proc_stat;
mod report;
mod store_app;
mod stub;
mod wrk;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use child::Announced;
use clap::Parser;
use payment::PaymentTemplate;
use report::Sample;

/// The load benchmark: tower-x402, the example store and other x402 middlewares under wrk.
#[derive(Parser)]
#[command(name = "x402-load")]
enum Cli {
    /// wrk against every case of this process's apps and the peers', in interleaved rounds.
    Run(Options),
    /// The store's resident memory under mixed traffic.
    Memory(memory::Options),
    /// A paid request's latency and whole-system CPU, the facilitator 50 ms away and its
    /// `/settle` as long as a chain: `exact` both ways, a channel's voucher, the `--peer`s.
    Latency(latency::Options),
    /// wrk against tower-x402's app paid with payment-channel vouchers, signed before the run.
    Channel(channel::Options),
    /// The stub facilitator (prints its address).
    Stub,
    /// tower-x402's app alone (prints its address): `/bare`, and `/paid/after` and
    /// `/paid/before` paying through the facilitator at `--facilitator`.
    App {
        /// The facilitator's base URL, `http://127.0.0.1:PORT`.
        #[arg(long, value_name = "URL")]
        facilitator: String,
        /// Speak HTTP/2 (prior knowledge) to the facilitator (the same as `--part http2`).
        #[arg(long)]
        http2: bool,
        /// The part of the paid path replaced (`run.sh --parts` measures each).
        #[arg(long, value_enum, default_value = "full")]
        part: parts::Part,
    },
    /// The example store alone in demo mode on a fresh SQLite file (prints its address, then the
    /// path of one SKU's paid route).
    Store,
    /// Writes wrk's Lua script paying `URL` (a payment built from its own 402, a fresh nonce per
    /// request) to `--out`.
    Script {
        /// The paid route.
        url: String,
        /// A number no other run against the same facilitator used (part of every nonce).
        #[arg(long, value_name = "N")]
        run: u32,
        /// Where the script goes.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Writes a curl config (`curl -K FILE`) of `--count` requests for `URL`, each paid with its
    /// own nonce (a payment built from the route's own 402), sent one after another on one
    /// connection: an exact number of paid requests.
    Curl {
        /// The paid route.
        url: String,
        /// How many requests.
        #[arg(long, value_name = "N")]
        count: u32,
        /// A number no other run against the same facilitator used (part of every nonce).
        #[arg(long, value_name = "N")]
        run: u32,
        /// Send no payment (the bare route, or the 402).
        #[arg(long)]
        unpaid: bool,
        /// Where the config goes.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// One measured case: what wrk asks for.
struct Case {
    name: &'static str,
    path: String,
    /// The payment wrk's script sends, with a fresh nonce per request; none for unpaid cases.
    payment: Option<PaymentTemplate>,
    /// Paid with payment-channel vouchers, signed before each wrk run (no `payment` then).
    channel: bool,
}

/// One process serving cases: this one (tower-x402 and the store) or a peer's.
struct Target {
    name: String,
    address: SocketAddr,
    /// The process whose CPU is counted, as `/proc` names it.
    pid: String,
    /// Where its facilitator's `/stats` are read: the stub's, or the app's own when the
    /// facilitator runs in its process.
    stats: SocketAddr,
    cases: Vec<Case>,
    /// The peer's process, stopped when the target is dropped.
    _process: Option<Announced>,
    /// How the peer's process was started, to start it again (`--respawn`).
    peer: Option<Peer>,
}

/// A `--peer`: the app's name, its binary and the arguments the binary is started with.
#[derive(Clone, Debug)]
struct Peer {
    name: String,
    binary: PathBuf,
    args: Vec<String>,
}

#[derive(clap::Args)]
struct Options {
    /// Rounds; every case of every app runs once in each.
    #[arg(long, value_name = "N", default_value_t = 5)]
    rounds: u32,
    /// Seconds wrk measures each case for.
    #[arg(long, value_name = "S", default_value_t = 5)]
    seconds: u64,
    /// Seconds of warm-up before each measurement (0: none).
    #[arg(long, value_name = "S", default_value_t = 1)]
    warm_up: u64,
    /// Connections wrk keeps open.
    #[arg(long, value_name = "C", default_value_t = 64)]
    connections: u32,
    /// Where the results are written (tab-separated).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/load-bench/results.tsv"
    )]
    out: PathBuf,
    /// Another middleware's app: a name and the binary serving `/bare` and `/paid`, with any
    /// arguments it takes after it (`NAME=BINARY ARG...`, split at spaces); repeat for more. The
    /// binary `self` is this one's `app`: tower-x402 in a process of its own, as the peers run;
    /// `self:PART` the same with one part of the paid path replaced (`app --part`).
    #[arg(long = "peer", value_name = "NAME=BINARY [ARG...]", value_parser = peer)]
    peers: Vec<Peer>,
    /// Start every peer afresh at each round, from a copy of its binary made for that round.
    /// The same bytes run from two files measured 4 to 8 µs a paid request apart, run after
    /// run (the files' pages sit differently in memory): with this, where a process and its
    /// binary happen to land is one round's draw, not the whole run's. The RSS printed at the
    /// end is then the last round's processes'.
    #[arg(long)]
    respawn: bool,
    /// The cases to run, besides each process's bare route (comma-separated); all when unset.
    /// `APP/CASE` names one app's case only (`x402-axum/paid`).
    #[arg(long, value_name = "CASE,...", value_delimiter = ',')]
    only: Vec<String>,
    /// Cases not to run, named as in `--only` (comma-separated).
    #[arg(long, value_name = "CASE,...", value_delimiter = ',')]
    skip: Vec<String>,
    /// Measure the `--peer` processes alone, not this process's apps and the store.
    #[arg(long)]
    peers_only: bool,
    /// Count each peer process's cache misses with `perf stat` during each run (reported as
    /// `n/a` where the machine has no such counter).
    #[arg(long)]
    cache_misses: bool,
    /// The most requests per second `paid_channel` is expected to reach: each of its wrk runs
    /// signs enough vouchers for that rate (and fails, naming this option, if a channel runs out).
    #[arg(long, value_name = "REQ/S", default_value_t = 30_000)]
    channel_rate: u32,
}

fn main() {
    let result = match Cli::parse() {
        Cli::Stub => run_stub(),
        Cli::App {
            facilitator,
            http2,
            part,
        } => run_app(&facilitator, if http2 { parts::Part::Http2 } else { part }),
        Cli::Store => run_store(),
        Cli::Script { url, run, out } => write_payment_script(url, run, &out),
        Cli::Curl {
            url,
            count,
            run,
            unpaid,
            out,
        } => write_curl_config(url, count, run, unpaid, &out),
        Cli::Run(options) => run(&options),
        Cli::Memory(options) => {
            runtime().and_then(|runtime| runtime.block_on(memory::run(&options)))
        }
        Cli::Latency(options) => {
            runtime().and_then(|runtime| runtime.block_on(latency::run(&options)))
        }
        Cli::Channel(options) => {
            runtime().and_then(|runtime| runtime.block_on(channel::run(&options)))
        }
    };
    if let Err(error) = result {
        eprintln!("x402-load: {error}");
        std::process::exit(1);
    }
}

/// `NAME=BINARY [ARG...]` of `--peer`.
fn peer(value: &str) -> Result<Peer, String> {
    let (name, command) = value
        .split_once('=')
        .ok_or_else(|| format!("NAME=BINARY [ARG...], not {value}"))?;
    let mut words = command.split_whitespace().map(str::to_owned);
    let binary = words
        .next()
        .ok_or_else(|| format!("{name}: no binary in {value}"))?;
    Ok(Peer {
        name: name.to_owned(),
        binary: PathBuf::from(binary),
        args: words.collect(),
    })
}

/// Whether `name`, from `--only` or `--skip`, names `app`'s `case`: `CASE` names it in every
/// app, `APP/CASE` in `app` alone.
fn names(name: &str, app: &str, case: &str) -> bool {
    match name.split_once('/') {
        Some((only_in, name)) => only_in == app && name == case,
        None => name == case,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("runtime: {error}"))
}

fn run_stub() -> Result<(), String> {
    runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("stub: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        println!("{address}");
        std::io::stdout()
            .flush()
            .map_err(|error| error.to_string())?;
        stub::serve(listener)
            .await
            .map_err(|error| format!("stub: {error}"))
    })
}

fn run_app(facilitator: &str, part: parts::Part) -> Result<(), String> {
    runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("app: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let router = app::router(facilitator, part).await?;
        println!("{address}");
        std::io::stdout()
            .flush()
            .map_err(|error| error.to_string())?;
        axum::serve(listener, router)
            .await
            .map_err(|error| format!("app: {error}"))
    })
}

fn run_store() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("x402-load-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|error| error.to_string())?;
    runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("store: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let routes = store_app::start(listener, &dir).await?;
        println!("{address}\n{}", routes.sku);
        std::io::stdout()
            .flush()
            .map_err(|error| error.to_string())?;
        std::future::pending::<()>().await;
        Ok(())
    })
}

fn write_payment_script(url: String, run: u32, out: &Path) -> Result<(), String> {
    let payment = runtime()?.block_on(payment_for(&reqwest::Client::new(), url.clone()))?;
    let path = reqwest::Url::parse(&url)
        .map_err(|error| format!("{url}: {error}"))?
        .path()
        .to_owned();
    std::fs::write(out, script_text(&payment, &path, run))
        .map_err(|error| format!("{}: {error}", out.display()))
}

fn write_curl_config(
    url: String,
    count: u32,
    run: u32,
    unpaid: bool,
    out: &Path,
) -> Result<(), String> {
    let payment = if unpaid {
        None
    } else {
        Some(runtime()?.block_on(payment_for(&reqwest::Client::new(), url.clone()))?)
    };
    let mut config = String::new();
    for request in 1..=count {
        if request > 1 {
            config.push_str("next\n");
        }
        config.push_str(&format!("url = \"{url}\"\noutput = \"/dev/null\"\n"));
        if let Some(payment) = &payment {
            config.push_str(&format!(
                "header = \"Payment-Signature: {}\"\n",
                payment.with_nonce(0xff, run, request)
            ));
        }
    }
    std::fs::write(out, config).map_err(|error| format!("{}: {error}", out.display()))
}

/// What the stub has counted so far.
struct StubStats {
    connections: u64,
    settles: u64,
    repeated_nonces: u64,
}

async fn stub_stats(http: &reqwest::Client, stub: SocketAddr) -> Result<StubStats, String> {
    let stats: serde_json::Value = http
        .get(format!("http://{stub}/stats"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|error| format!("stub /stats: {error}"))?
        .json()
        .await
        .map_err(|error| format!("stub /stats: {error}"))?;
    let count = |name: &str| {
        stats[name]
            .as_u64()
            .ok_or_else(|| format!("stub /stats: no {name}"))
    };
    Ok(StubStats {
        connections: count("connections")?,
        settles: count("settles")?,
        repeated_nonces: count("repeatedNonces")?,
    })
}

/// The payment for the route at `url`, built from its own 402.
async fn payment_for(http: &reqwest::Client, url: String) -> Result<PaymentTemplate, String> {
    let answer = http
        .get(&url)
        .send()
        .await
        .map_err(|error| format!("{url}: {error}"))?;
    if answer.status() != reqwest::StatusCode::PAYMENT_REQUIRED {
        return Err(format!("{url} answered {}, not 402", answer.status()));
    }
    let challenge = answer
        .headers()
        .get("payment-required")
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| format!("{url}: a 402 without PAYMENT-REQUIRED"))?;
    payment::from_challenge(challenge).map_err(|error| format!("{url}: {error}"))
}

/// This process's apps: the layer's routes and the store's.
async fn local_targets(
    http: &reqwest::Client,
    stub: SocketAddr,
    data: &Path,
) -> Result<Vec<Target>, String> {
    let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
    // The layer's app, paying through the stub in HTTP/1.1 or HTTP/2; its address.
    let serve_layer = |part: parts::Part| async move {
        let listener = bind().await.map_err(|error| format!("app: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let router = app::router(&format!("http://{stub}"), part).await?;
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok::<_, String>(address)
    };
    let layer = serve_layer(parts::Part::Full).await?;
    // The same app speaking HTTP/2 to the facilitator: one multiplexed connection.
    let layer_h2 = serve_layer(parts::Part::Http2).await?;
    let listener = bind().await.map_err(|error| format!("store: {error}"))?;
    let store = listener.local_addr().map_err(|error| error.to_string())?;
    let routes = store_app::start(listener, data).await?;
    let paid = |path: &str| payment_for(http, format!("http://{layer}{path}"));
    let cases = vec![
        Case::unpaid("bare", app::BARE),
        Case::unpaid("bare_402", app::BARE_402),
        Case::unpaid("402", app::PAID_AFTER),
        Case::paid("paid_after", app::PAID_AFTER, paid(app::PAID_AFTER).await?),
        Case::paid(
            "paid_before",
            app::PAID_BEFORE,
            paid(app::PAID_BEFORE).await?,
        ),
        Case::paid("paid_upto", app::PAID_UPTO, paid(app::PAID_UPTO).await?),
    ];
    let paid_h2 = payment_for(http, format!("http://{layer_h2}{}", app::PAID_AFTER)).await?;
    let cases_h2 = vec![
        Case::unpaid("bare", app::BARE),
        Case::paid("paid_after", app::PAID_AFTER, paid_h2),
    ];
    Ok(vec![
        Target::local("tower-x402", layer, stub, cases),
        Target::local("tower-x402-h2", layer_h2, stub, cases_h2),
        Target::local(
            "store",
            store,
            stub,
            vec![
                Case::unpaid("bare", routes.bare),
                Case::unpaid("402", &routes.sku),
                Case::unpaid("x402.json", routes.well_known),
            ],
        ),
    ])
}

/// A peer's app as a child process, paying through `stub`; started from a copy of its binary
/// made in `copies` when that is given.
async fn peer_target(
    http: &reqwest::Client,
    peer: &Peer,
    stub: SocketAddr,
    copies: Option<&Path>,
) -> Result<Target, String> {
    let name = peer.name.as_str();
    let this = peer.binary.to_str().and_then(|binary| {
        binary
            .strip_prefix("self:")
            .or((binary == "self").then_some("full"))
    });
    let (binary, mut args) = match this {
        Some(part) => (
            std::env::current_exe().map_err(|error| error.to_string())?,
            vec!["app".to_owned(), "--part".to_owned(), part.to_owned()],
        ),
        None => (peer.binary.clone(), Vec::new()),
    };
    args.extend(peer.args.iter().cloned());
    let copy = copies
        .map(|dir| fresh_copy(&binary, dir, name))
        .transpose()?;
    let mut command = Command::new(copy.as_deref().unwrap_or(&binary));
    command
        .args(&args)
        .arg("--facilitator")
        .arg(format!("http://{stub}"));
    let process = Announced::spawn(command, name);
    // The running process keeps the copy's pages; its name is no longer needed.
    if let Some(copy) = copy {
        let _ = std::fs::remove_file(copy);
    }
    let process = process?;
    let address = process.address;
    let payment = payment_for(http, format!("http://{address}/paid")).await?;
    let in_process = this
        .and_then(|part| <parts::Part as clap::ValueEnum>::from_str(part, true).ok())
        == Some(parts::Part::FacilitatorInProcess);
    let mut cases = vec![
        Case::unpaid("bare", "/bare"),
        Case::unpaid("402", "/paid"),
        Case::paid("paid", "/paid", payment),
    ];
    // tower-x402's full path also sells the route settled before the work (`/settle` alone)
    // and the route paid with vouchers, and answers the 402's bytes without the layer.
    if this == Some("full") {
        let before = payment_for(http, format!("http://{address}{}", app::PAID_BEFORE)).await?;
        cases.push(Case::paid("paid_before", app::PAID_BEFORE, before));
        // The 402's bytes answered by a handler with no layer: what the bytes cost.
        cases.push(Case::unpaid("bare_402", app::BARE_402));
        cases.push(Case {
            name: "paid_channel",
            path: channel::CHANNEL.to_owned(),
            payment: None,
            channel: true,
        });
    }
    Ok(Target {
        name: name.to_owned(),
        address,
        pid: process.pid(),
        stats: if in_process { address } else { stub },
        cases,
        _process: Some(process),
        peer: Some(peer.clone()),
    })
}

/// A copy of `binary` in `dir`, named after the app `name`: a file of its own, whose pages the
/// kernel places afresh.
fn fresh_copy(binary: &Path, dir: &Path, name: &str) -> Result<PathBuf, String> {
    let file: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let copy = dir.join(file);
    std::fs::copy(binary, &copy)
        .map_err(|error| format!("copying {} for {name}: {error}", binary.display()))?;
    Ok(copy)
}

/// Keeps the cases of `target` that `--only` and `--skip` ask for (the bare route unless skipped).
fn keep_cases(options: &Options, target: &mut Target) {
    let app = &target.name;
    let named = |list: &[String], case: &str| list.iter().any(|name| names(name, app, case));
    target.cases.retain(|case| {
        (case.name == "bare" || options.only.is_empty() || named(&options.only, case.name))
            && !named(&options.skip, case.name)
    });
}

impl Case {
    fn unpaid(name: &'static str, path: &str) -> Self {
        Self {
            name,
            path: path.to_owned(),
            payment: None,
            channel: false,
        }
    }

    fn paid(name: &'static str, path: &str, payment: PaymentTemplate) -> Self {
        Self {
            name,
            path: path.to_owned(),
            payment: Some(payment),
            channel: false,
        }
    }
}

impl Target {
    fn local(name: &str, address: SocketAddr, stub: SocketAddr, cases: Vec<Case>) -> Self {
        Self {
            name: name.to_owned(),
            address,
            pid: "self".to_owned(),
            stats: stub,
            cases,
            _process: None,
            peer: None,
        }
    }
}

fn run(options: &Options) -> Result<(), String> {
    let bench = Bench {
        options,
        stub: child::start_stub()?,
        runtime: runtime()?,
        http: reqwest::Client::new(),
        scratch: std::env::temp_dir().join(format!("x402-load-{}", std::process::id())),
        deposits: std::cell::Cell::new(0),
    };
    let (stub, runtime, http, scratch) = (&bench.stub, &bench.runtime, &bench.http, &bench.scratch);
    std::fs::create_dir_all(scratch).map_err(|error| error.to_string())?;
    let rss_fresh = proc_stat::rss_kib("self")?;
    let mut targets = if options.peers_only {
        Vec::new()
    } else {
        runtime.block_on(local_targets(http, stub.address, scratch))?
    };
    let copies = options.respawn.then(|| scratch.join("binaries"));
    if let Some(copies) = &copies {
        std::fs::create_dir_all(copies).map_err(|error| error.to_string())?;
    }
    for peer in &options.peers {
        let target = peer_target(http, peer, stub.address, copies.as_deref());
        targets.push(runtime.block_on(target)?);
    }
    for target in &mut targets {
        keep_cases(options, target);
    }
    println!(
        "stub facilitator {}, wrk -t2 -c{} -d{}s after {}s warm-up, {} rounds",
        stub.address, options.connections, options.seconds, options.warm_up, options.rounds
    );
    for target in &targets {
        println!(
            "{} at {} (process {})",
            target.name, target.address, target.pid
        );
    }
    let mut run_tag = 0;
    let mut samples = Vec::new();
    for round in 1..=options.rounds {
        if round > 1 && options.respawn {
            for target in &mut targets {
                let Some(peer) = target.peer.clone() else {
                    continue;
                };
                // The last round's process stops before the next one starts.
                target._process = None;
                *target =
                    runtime.block_on(peer_target(http, &peer, stub.address, copies.as_deref()))?;
                keep_cases(options, target);
            }
        }
        // The bare route's rate in this round, per target: each target's cases are divided by
        // its own bare route (the store's by its static stylesheet, through its whole stack).
        let mut bare_rates: HashMap<&str, f64> = HashMap::new();
        // Each round starts one target later than the last, so that no app always runs first
        // in its round, on a machine that warms and cools.
        let start = (round as usize - 1) % targets.len().max(1);
        for target in targets[start..].iter().chain(&targets[..start]) {
            for case in &target.cases {
                run_tag += 1;
                let sample = bench.measure(target, case, round, run_tag)?;
                if case.name == "bare" {
                    bare_rates.insert(&target.name, sample.wrk.per_second);
                }
                let sample = Sample {
                    ratio: sample.wrk.per_second
                        / bare_rates
                            .get(target.name.as_str())
                            .copied()
                            .unwrap_or(f64::NAN),
                    ..sample
                };
                report::print_sample(&sample);
                samples.push(sample);
            }
        }
    }
    let rss_after = proc_stat::rss_kib("self")?;
    // A channel's deposit settles at the stub outside its ledger of nonces: not a repeat.
    let repeated = bench
        .settled_stats_at(bench.stub.address)?
        .repeated_nonces
        .saturating_sub(bench.deposits.get());
    report::summarize(&samples);
    report::against_peers(&samples);
    println!(
        "\nthis process (tower-x402, tower-x402-h2 and the store): RSS {:.1} MB fresh, {:.1} MB after the runs",
        rss_fresh as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    for target in targets.iter().filter(|t| t.pid != "self") {
        println!(
            "{}: RSS {:.1} MB after the runs",
            target.name,
            proc_stat::rss_kib(&target.pid)? as f64 / 1024.0
        );
    }
    println!("nonces the stub saw twice: {repeated}");
    report::write_results(&options.out, &samples)?;
    let _ = std::fs::remove_dir_all(scratch);
    if repeated > 0 {
        return Err(format!("the stub saw {repeated} nonces twice"));
    }
    Ok(())
}

/// What every measured run shares.
struct Bench<'a> {
    options: &'a Options,
    stub: Announced,
    runtime: tokio::runtime::Runtime,
    /// Reads the stub's counters and the apps' challenges.
    http: reqwest::Client,
    /// Where wrk's scripts and the store's database go.
    scratch: PathBuf,
    /// Channel deposits settled at the stub so far (`paid_channel`).
    deposits: std::cell::Cell<u64>,
}

impl Bench<'_> {
    /// Warms `case` up, then measures it; the ratio is left for the caller.
    fn measure(
        &self,
        target: &Target,
        case: &Case,
        round: u32,
        run_tag: u32,
    ) -> Result<Sample, String> {
        let options = self.options;
        let url = format!("http://{}{}", target.address, case.path);
        // Warm-up and measured runs use different nonces: the tag is doubled, plus one.
        let script = |tag: u32| -> Result<Option<PathBuf>, String> {
            case.payment
                .as_ref()
                .map(|payment| write_script(&self.scratch, case, payment, tag))
                .transpose()
        };
        // Vouchers run one wrk thread per connection (each connection is a channel).
        let threads = if case.channel { options.connections } else { 2 };
        let wrk = |seconds: u64, script: Option<&Path>| {
            wrk::run(&url, seconds, threads, options.connections, script)
        };
        // Each wrk run spends fresh channels: their vouchers, signed for `seconds`.
        let channels = |seconds: u64, tag: u32| -> Result<Option<channel::Channels>, String> {
            if !case.channel {
                return Ok(None);
            }
            let rate = u64::from(options.channel_rate) * seconds;
            let vouchers = rate.div_ceil(u64::from(options.connections.max(1))) + 100;
            let base = format!("http://{}", target.address);
            let dir = self.scratch.join(format!("channel-{tag}"));
            let opened = self.runtime.block_on(channel::Channels::open(
                &self.http,
                &base,
                options.connections,
                u32::try_from(vouchers).map_err(|_| "--channel-rate is too high")?,
                &dir,
            ))?;
            println!("{} {}: {}", target.name, case.name, opened.summary);
            self.deposits
                .set(self.deposits.get() + u64::from(options.connections));
            Ok(Some(opened))
        };
        if options.warm_up > 0 {
            let warm = channels(options.warm_up, run_tag * 2)?;
            let script = match &warm {
                Some(channels) => Some(channels.script.clone()),
                None => script(run_tag * 2)?,
            };
            wrk(options.warm_up, script.as_deref())?;
        }
        let measured_channels = channels(options.seconds, run_tag * 2 + 1)?;
        let measured = match &measured_channels {
            Some(channels) => Some(channels.script.clone()),
            None => script(run_tag * 2 + 1)?,
        };
        let before = self.stats_at(target.stats)?;
        let app_before = proc_stat::cpu_seconds(&target.pid)?;
        let stub_before = proc_stat::cpu_seconds(&self.stub.pid())?;
        let switches_before = proc_stat::context_switches(&target.pid)?;
        // Counted for apps in a process of their own only: this one also runs wrk's scripts' setup.
        let cache = (options.cache_misses && target.pid != "self")
            .then(|| proc_stat::CacheMisses::start(&target.pid, options.seconds))
            .flatten();
        let result = wrk(options.seconds, measured.as_deref())?;
        let app_cpu = proc_stat::cpu_seconds(&target.pid)? - app_before;
        let switches = proc_stat::context_switches(&target.pid)? - switches_before;
        let cache_misses = cache.and_then(proc_stat::CacheMisses::finish);
        let stub_cpu = proc_stat::cpu_seconds(&self.stub.pid())? - stub_before;
        let after = self.stats_at(target.stats)?;
        // Named with the run in whose window it came, so that the run's end says whose it was;
        // read again once the run's last settlements have ended, which would look like repeats.
        let mut repeated = after.repeated_nonces.saturating_sub(before.repeated_nonces);
        if repeated > 0 {
            let settled = self.settled_stats_at(target.stats)?;
            repeated = settled
                .repeated_nonces
                .saturating_sub(before.repeated_nonces);
        }
        if repeated > 0 {
            println!(
                "round {round} {} {}: the stub saw {repeated} nonces twice during this run",
                target.name, case.name
            );
        }
        if case.payment.is_some() {
            check_paid_run(
                target,
                case,
                &result,
                after.settles - before.settles,
                options,
            )?;
        }
        if let Some(channels) = &measured_channels {
            check_channel_run(target, case, &result, after.settles - before.settles)?;
            let base = format!("http://{}", target.address);
            self.runtime
                .block_on(channels.check_charged(&self.http, &base, result.requests))
                .map_err(|error| format!("{} {}: {error}", target.name, case.name))?;
        }
        let requests = result.requests.max(1) as f64;
        Ok(Sample {
            round,
            target: target.name.clone(),
            case: case.name,
            wrk: result,
            app_cpu_us: app_cpu * 1e6 / requests,
            switches_per_request: switches as f64 / requests,
            cache_misses_per_request: cache_misses.map(|misses| misses as f64 / requests),
            stub_cpu_us: stub_cpu * 1e6 / requests,
            new_connections: (case.payment.is_some() || case.channel)
                .then(|| after.connections - before.connections),
            ratio: f64::NAN,
        })
    }

    /// The `/stats` served at `address`: the stub's, or an app's with the facilitator in process.
    fn stats_at(&self, address: SocketAddr) -> Result<StubStats, String> {
        self.runtime.block_on(stub_stats(&self.http, address))
    }

    /// [`stats_at`](Self::stats_at) once the settlements still running have ended: a `/settle`
    /// counts as a call when it arrives and as a settlement when it has settled, so while one
    /// is under way it looks like a repeated nonce. Read until two reads 100 ms apart agree
    /// (at most 5 s).
    fn settled_stats_at(&self, address: SocketAddr) -> Result<StubStats, String> {
        let mut last = self.stats_at(address)?;
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = self.stats_at(address)?;
            let settled =
                now.settles == last.settles && now.repeated_nonces == last.repeated_nonces;
            last = now;
            if settled {
                break;
            }
        }
        Ok(last)
    }
}

/// A paid run measures payments only if every request was answered 200 and reached the
/// stub's `/settle` once: a repeated nonce answered from a settlement record, or a refusal,
/// would be cheaper work passed off as a payment.
fn check_paid_run(
    target: &Target,
    case: &Case,
    result: &wrk::WrkResult,
    settles: u64,
    options: &Options,
) -> Result<(), String> {
    let what = format!("{} {}", target.name, case.name);
    if result.non_2xx > 0 || result.socket_errors > 0 {
        return Err(format!(
            "{what}: {} answers were not 2xx and {} sockets failed",
            result.non_2xx, result.socket_errors
        ));
    }
    // Requests still in flight when wrk stopped may have settled without being counted: those
    // of the measured run, and those of the warm-up run before it whose settlement (which no
    // hang-up cancels) ended after the stub's count was read.
    let in_flight = 2 * u64::from(options.connections);
    if settles < result.requests || settles > result.requests + in_flight {
        return Err(format!(
            "{what}: {} requests answered, {settles} settlements at the stub",
            result.requests
        ));
    }
    Ok(())
}

/// A voucher run measures vouchers only if every request was answered 200 and none reached the
/// facilitator (the channels' deposits were made before it).
fn check_channel_run(
    target: &Target,
    case: &Case,
    result: &wrk::WrkResult,
    settles: u64,
) -> Result<(), String> {
    let what = format!("{} {}", target.name, case.name);
    if result.non_2xx > 0 || result.socket_errors > 0 {
        return Err(format!(
            "{what}: {} answers were not 2xx and {} sockets failed",
            result.non_2xx, result.socket_errors
        ));
    }
    if settles > 0 {
        return Err(format!(
            "{what}: {settles} settlements at the facilitator during a voucher run"
        ));
    }
    Ok(())
}

fn write_script(
    dir: &Path,
    case: &Case,
    payment: &PaymentTemplate,
    tag: u32,
) -> Result<PathBuf, String> {
    let path = dir.join(format!("{}-{tag}.lua", case.name));
    std::fs::write(&path, script_text(payment, &case.path, tag))
        .map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(path)
}

/// wrk's Lua script sending `payment` to `path` with a fresh nonce per request; `tag` is the run.
fn script_text(payment: &PaymentTemplate, path: &str, tag: u32) -> String {
    format!(
        "TEMPLATE = \"{}\"\nOFFSET = {}\nPATH = \"{}\"\nRUN = {tag}\nDECIMAL = {}\n{}",
        payment.header,
        payment.offset,
        path,
        payment.decimal,
        include_str!("nonce.lua")
    )
}
