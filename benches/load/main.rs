//! The load benchmark: wrk against a bare route, the 402 path and the paid path in both
//! settlement modes, served by this process and paid through a stub facilitator (a child
//! process) over loopback HTTP. Run it with `bash benches/load/run.sh`, which installs wrk and
//! builds this in release mode; `x402-load run --help` lists the options.
//!
//! Rounds are interleaved (bare, then each case, every round) and every ratio pairs a case with
//! the bare run of its own round, so a machine busy with other work skews both sides alike.

mod app;
mod proc_stat;
mod stub;
mod wrk;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tower_x402::SettlementMode;

const USAGE: &str =
    "usage: x402-load run [--rounds N] [--seconds S] [--warm-up S] [--connections C] [--out FILE]
       x402-load stub   (the stub facilitator; prints its address)";

/// One measured case: what wrk asks for.
struct Case {
    name: &'static str,
    path: &'static str,
    /// The settlement mode whose payment wrk's script sends; none for unpaid requests.
    paid: Option<SettlementMode>,
}

const CASES: [Case; 4] = [
    Case {
        name: "bare",
        path: app::BARE,
        paid: None,
    },
    Case {
        name: "402",
        path: app::PAID_AFTER,
        paid: None,
    },
    Case {
        name: "paid_after",
        path: app::PAID_AFTER,
        paid: Some(SettlementMode::After),
    },
    Case {
        name: "paid_before",
        path: app::PAID_BEFORE,
        paid: Some(SettlementMode::Before),
    },
];

struct Options {
    rounds: u32,
    seconds: u64,
    warm_up: u64,
    connections: u32,
    out: PathBuf,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("stub") => run_stub(),
        Some("run") => options(&args[1..]).and_then(|options| run(&options)),
        _ => Err(USAGE.to_owned()),
    };
    if let Err(error) = result {
        eprintln!("x402-load: {error}");
        std::process::exit(1);
    }
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        rounds: 5,
        seconds: 5,
        warm_up: 1,
        connections: 64,
        out: PathBuf::from("target/load-bench/results.tsv"),
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--rounds" => options.rounds = u32::try_from(number()?).map_err(|e| e.to_string())?,
            "--seconds" => options.seconds = number()?,
            "--warm-up" => options.warm_up = number()?,
            "--connections" => {
                options.connections = u32::try_from(number()?).map_err(|e| e.to_string())?
            }
            "--out" => options.out = PathBuf::from(value),
            _ => return Err(USAGE.to_owned()),
        }
    }
    Ok(options)
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

/// The stub facilitator as a child process, killed when dropped.
struct Stub {
    child: Child,
    address: SocketAddr,
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_stub() -> Result<Stub, String> {
    let exe = std::env::current_exe().map_err(|error| error.to_string())?;
    let mut child = Command::new(exe)
        .arg("stub")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("starting the stub: {error}"))?;
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|error| error.to_string())?;
    }
    let address = line
        .trim()
        .parse()
        .map_err(|_| format!("the stub printed {line:?}, not its address"))?;
    Ok(Stub { child, address })
}

/// How many connections the stub accepted and how many nonces it saw twice.
async fn stub_stats(stub: SocketAddr) -> Result<(u64, u64), String> {
    let stats: serde_json::Value = reqwest_get(&format!("http://{stub}/stats")).await?;
    Ok((
        stats["connections"].as_u64().unwrap_or_default(),
        stats["repeatedNonces"].as_u64().unwrap_or_default(),
    ))
}

async fn reqwest_get(url: &str) -> Result<serde_json::Value, String> {
    let text = tokio::process::Command::new("curl")
        .args(["-sf", url])
        .output()
        .await
        .map_err(|error| format!("curl: {error}"))?;
    serde_json::from_slice(&text.stdout).map_err(|error| format!("{url}: {error}"))
}

/// One case's numbers in one round.
struct Sample {
    round: u32,
    case: &'static str,
    wrk: wrk::WrkResult,
    app_cpu_us: f64,
    stub_cpu_us: f64,
    new_connections: u64,
    ratio: f64,
}

fn run(options: &Options) -> Result<(), String> {
    let stub = start_stub()?;
    let runtime = runtime()?;
    let app = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("app: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let router = app::router(stub.address)?;
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok::<_, String>(address)
    })?;
    let scripts = std::env::temp_dir().join(format!("x402-load-{}", std::process::id()));
    std::fs::create_dir_all(&scripts).map_err(|error| error.to_string())?;
    let rss_fresh = proc_stat::rss_kib("self")?;
    println!(
        "app {app}, stub facilitator {}, wrk -t2 -c{} -d{}s after {}s warm-up, {} rounds",
        stub.address, options.connections, options.seconds, options.warm_up, options.rounds
    );
    let mut run_tag = 0;
    let mut samples = Vec::new();
    for round in 1..=options.rounds {
        let mut bare_rate = 0.0;
        for case in &CASES {
            let url = format!("http://{app}{}", case.path);
            let script = |tag: u32| -> Result<Option<PathBuf>, String> {
                case.paid
                    .map(|mode| write_script(&scripts, case, mode, tag))
                    .transpose()
            };
            run_tag += 1;
            let warm_up = script(run_tag)?;
            if options.warm_up > 0 {
                wrk::run(
                    &url,
                    options.warm_up,
                    2,
                    options.connections,
                    warm_up.as_deref(),
                )?;
            }
            run_tag += 1;
            let measured = script(run_tag)?;
            let (connections_before, _) = runtime.block_on(stub_stats(stub.address))?;
            let app_before = proc_stat::cpu_seconds("self")?;
            let stub_before = proc_stat::cpu_seconds(&stub.child.id().to_string())?;
            let result = wrk::run(
                &url,
                options.seconds,
                2,
                options.connections,
                measured.as_deref(),
            )?;
            let app_cpu = proc_stat::cpu_seconds("self")? - app_before;
            let stub_cpu = proc_stat::cpu_seconds(&stub.child.id().to_string())? - stub_before;
            let (connections_after, _) = runtime.block_on(stub_stats(stub.address))?;
            if case.name == "bare" {
                bare_rate = result.per_second;
            }
            let requests = result.requests.max(1) as f64;
            let sample = Sample {
                round,
                case: case.name,
                wrk: result,
                app_cpu_us: app_cpu * 1e6 / requests,
                stub_cpu_us: stub_cpu * 1e6 / requests,
                // Less the one connection that reading the stats after the run opened.
                new_connections: (connections_after - connections_before).saturating_sub(1),
                ratio: result.per_second / bare_rate,
            };
            print_sample(&sample);
            samples.push(sample);
        }
    }
    let rss_after = proc_stat::rss_kib("self")?;
    let (_, repeated) = runtime.block_on(stub_stats(stub.address))?;
    summarize(&samples, rss_fresh, rss_after, repeated);
    write_results(&options.out, &samples)?;
    let _ = std::fs::remove_dir_all(&scripts);
    if repeated > 0 {
        return Err(format!("the stub saw {repeated} nonces twice"));
    }
    Ok(())
}

fn write_script(
    dir: &Path,
    case: &Case,
    mode: SettlementMode,
    tag: u32,
) -> Result<PathBuf, String> {
    let (template, offset) = app::payment_template(mode)?;
    let path = dir.join(format!("{}-{tag}.lua", case.name));
    let script = format!(
        "TEMPLATE = \"{template}\"\nOFFSET = {offset}\nPATH = \"{}\"\nRUN = {tag}\n{}",
        case.path,
        include_str!("nonce.lua")
    );
    std::fs::write(&path, script).map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(path)
}

fn print_sample(sample: &Sample) {
    println!(
        "round {} {:<12} {:>9.0} req/s  p50 {:>7.0} µs  p99 {:>7.0} µs  app CPU {:>6.1} µs/req  stub CPU {:>6.1} µs/req  new facilitator connections {:>3}  non-2xx {:>7}  socket errors {}  ratio to bare {:.3}",
        sample.round,
        sample.case,
        sample.wrk.per_second,
        sample.wrk.p50_us,
        sample.wrk.p99_us,
        sample.app_cpu_us,
        sample.stub_cpu_us,
        sample.new_connections,
        sample.wrk.non_2xx,
        sample.wrk.socket_errors,
        sample.ratio,
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn summarize(samples: &[Sample], rss_fresh: u64, rss_after: u64, repeated: u64) {
    println!(
        "\nmedians over rounds (ratio: req/s over the bare route's in the same round)\n\n| case | req/s | p50 µs | p99 µs | app CPU µs/req | stub CPU µs/req | new facilitator connections (max per run) | ratio to bare |\n|---|---|---|---|---|---|---|---|"
    );
    for case in &CASES {
        let of = |f: &dyn Fn(&Sample) -> f64| {
            median(
                samples
                    .iter()
                    .filter(|s| s.case == case.name)
                    .map(f)
                    .collect(),
            )
        };
        let connections = samples
            .iter()
            .filter(|s| s.case == case.name)
            .map(|s| s.new_connections)
            .max()
            .unwrap_or_default();
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {:.3} |",
            case.name,
            of(&|s| s.wrk.per_second),
            of(&|s| s.wrk.p50_us),
            of(&|s| s.wrk.p99_us),
            of(&|s| s.app_cpu_us),
            of(&|s| s.stub_cpu_us),
            connections,
            of(&|s| s.ratio),
        );
    }
    println!(
        "\napp RSS: {:.1} MB fresh, {:.1} MB after the runs; nonces the stub saw twice: {repeated}",
        rss_fresh as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
}

/// Every sample as tab-separated values, for `benches/load/chart.py`.
fn write_results(path: &Path, samples: &[Sample]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| error.to_string())?;
    }
    let mut text = String::from(
        "impl\tround\tcase\treq_per_s\tp50_us\tp99_us\tapp_cpu_us\tstub_cpu_us\tnew_connections\tratio\n",
    );
    for s in samples {
        text.push_str(&format!(
            "tower-x402\t{}\t{}\t{:.0}\t{:.0}\t{:.0}\t{:.1}\t{:.1}\t{}\t{:.4}\n",
            s.round,
            s.case,
            s.wrk.per_second,
            s.wrk.p50_us,
            s.wrk.p99_us,
            s.app_cpu_us,
            s.stub_cpu_us,
            s.new_connections,
            s.ratio
        ));
    }
    std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))?;
    println!("results: {}", path.display());
    Ok(())
}
