//! What the load benchmark prints and writes: every run as it ends, the medians over rounds as
//! a Markdown table, and every run as tab-separated values for `chart.py`.

use std::path::Path;

use crate::wrk::WrkResult;

/// One case's numbers in one round.
pub(crate) struct Sample {
    pub(crate) round: u32,
    /// Whose app served it: `tower-x402`, `store`, or a peer's name.
    pub(crate) target: String,
    pub(crate) case: &'static str,
    pub(crate) wrk: WrkResult,
    pub(crate) app_cpu_us: f64,
    /// The app process's context switches (every thread) per request.
    pub(crate) switches_per_request: f64,
    /// The app process's cache misses per request (`perf stat`), when counted.
    pub(crate) cache_misses_per_request: Option<f64>,
    /// The stub facilitator's CPU per request; zero for unpaid cases.
    pub(crate) stub_cpu_us: f64,
    /// Connections the stub accepted during the measured run; none for unpaid cases.
    pub(crate) new_connections: Option<u64>,
    /// Requests/s over the bare route of the same app (target) in the same round.
    pub(crate) ratio: f64,
}

pub(crate) fn print_sample(sample: &Sample) {
    println!(
        "round {} {:<10} {:<12} {:>9.0} req/s  p50 {:>7.0} µs  p99 {:>7.0} µs  app CPU {:>6.1} µs/req  switches {:>5.2}/req  cache misses {}/req  stub CPU {:>6.1} µs/req  new facilitator connections {:>3}  non-2xx {:>7}  socket errors {}  ratio to bare {:.3}",
        sample.round,
        sample.target,
        sample.case,
        sample.wrk.per_second,
        sample.wrk.p50_us,
        sample.wrk.p99_us,
        sample.app_cpu_us,
        sample.switches_per_request,
        misses(sample.cache_misses_per_request),
        sample.stub_cpu_us,
        sample
            .new_connections
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        sample.wrk.non_2xx,
        sample.wrk.socket_errors,
        sample.ratio,
    );
}

/// Cache misses per request, or `n/a` where they were not counted.
fn misses(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |misses| format!("{misses:.0}"))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Prints the medians over rounds of every (target, case), in the order they ran.
pub(crate) fn summarize(samples: &[Sample]) {
    println!(
        "\nmedians over rounds (ratio: req/s over the bare route of the same app, same round)\n\n| app | case | req/s | p50 µs | p99 µs | app CPU µs/req | context switches/req | cache misses/req | stub CPU µs/req | new facilitator connections (per run) | ratio to bare |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for sample in samples {
        let key = (sample.target.as_str(), sample.case);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let runs: Vec<&Sample> = samples
            .iter()
            .filter(|s| (s.target.as_str(), s.case) == key)
            .collect();
        let of = |f: &dyn Fn(&Sample) -> f64| median(runs.iter().map(|s| f(s)).collect());
        // Only paid cases reach the stub: the others get no stub columns.
        let (stub_cpu, connections) = if sample.new_connections.is_some() {
            let per_run: Vec<String> = runs
                .iter()
                .map(|s| s.new_connections.unwrap_or_default().to_string())
                .collect();
            (format!("{:.1}", of(&|s| s.stub_cpu_us)), per_run.join(", "))
        } else {
            ("–".to_owned(), "–".to_owned())
        };
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} | {} | {stub_cpu} | {connections} | {:.3} |",
            key.0,
            key.1,
            of(&|s| s.wrk.per_second),
            of(&|s| s.wrk.p50_us),
            of(&|s| s.wrk.p99_us),
            of(&|s| s.app_cpu_us),
            of(&|s| s.switches_per_request),
            if runs.iter().all(|s| s.cache_misses_per_request.is_some()) {
                misses(Some(of(&|s| {
                    s.cache_misses_per_request.unwrap_or_default()
                })))
            } else {
                misses(None)
            },
            of(&|s| s.ratio),
        );
    }
}

/// Every sample as tab-separated values, for `benches/load/chart.py`.
pub(crate) fn write_results(path: &Path, samples: &[Sample]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| error.to_string())?;
    }
    let mut text = String::from(
        "impl\tround\tcase\treq_per_s\tp50_us\tp99_us\tapp_cpu_us\tstub_cpu_us\tnew_connections\tratio\tswitches_per_req\tcache_misses_per_req\n",
    );
    for s in samples {
        text.push_str(&format!(
            "{}\t{}\t{}\t{:.0}\t{:.0}\t{:.0}\t{:.1}\t{:.1}\t{}\t{:.4}\t{:.2}\t{}\n",
            s.target,
            s.round,
            s.case,
            s.wrk.per_second,
            s.wrk.p50_us,
            s.wrk.p99_us,
            s.app_cpu_us,
            s.stub_cpu_us,
            s.new_connections
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            s.ratio,
            s.switches_per_request,
            misses(s.cache_misses_per_request),
        ));
    }
    std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))?;
    println!("results: {}", path.display());
    Ok(())
}

/// tower-x402's paid rows in a process of its own against x402-axum's paid request, round by
/// round, each as a throughput ratio with its target: settled first (`paid_before`, at least
/// 1.3×), settled after the work (`paid`, reported), vouchers (`paid_channel`, at least 1.5×);
/// and the 402 over the same process's bare route (at least 0.95×), beside the same 402 bytes
/// answered by a handler without the layer (`bare_402`), which tells the bytes' cost from the
/// layer's. Prints nothing without x402-axum's rows and tower-x402's (run with `--peers`).
pub(crate) fn against_peers(samples: &[Sample]) {
    const REFERENCE: &str = "x402-axum";
    /// (label, app, case, over what, target): `None` over what is x402-axum's paid request.
    const ROWS: [(&str, &str, &str, Option<&str>, Option<f64>); 6] = [
        (
            "settled first",
            "tower-x402-process",
            "paid_before",
            None,
            Some(1.3),
        ),
        ("settled after", "tower-x402-process", "paid", None, None),
        (
            "vouchers",
            "tower-x402-channel",
            "paid_channel",
            None,
            Some(1.5),
        ),
        (
            "402 ÷ bare",
            "tower-x402-process",
            "402",
            Some("bare"),
            Some(0.95),
        ),
        (
            "its bytes unlayered ÷ bare",
            "tower-x402-process",
            "bare_402",
            Some("bare"),
            None,
        ),
        (
            "402 ÷ its bytes unlayered",
            "tower-x402-process",
            "402",
            Some("bare_402"),
            Some(0.95),
        ),
    ];
    let find = |round: u32, target: &str, case: &str| {
        samples
            .iter()
            .find(|s| s.round == round && s.target == target && s.case == case)
    };
    let mut rounds: Vec<u32> = samples
        .iter()
        .filter(|s| s.target == REFERENCE)
        .filter(|s| {
            ROWS.iter()
                .any(|&(_, app, ..)| find(s.round, app, "bare").is_some())
        })
        .map(|s| s.round)
        .collect();
    rounds.dedup();
    if rounds.is_empty() {
        return;
    }
    println!(
        "
tower-x402 in a process of its own, per round: req/s over {REFERENCE}'s paid req/s (the 402: over its own bare route)\n"
    );
    let mut header = String::from("| round |");
    let mut rule = String::from("|---|");
    for (label, _, _, _, target) in ROWS {
        match target {
            Some(target) => header.push_str(&format!(" {label} (≥ {target}×) |")),
            None => header.push_str(&format!(" {label} |")),
        }
        rule.push_str("---|");
    }
    println!("{header}\n{rule}");
    let mut met = [0_usize; ROWS.len()];
    for &round in &rounds {
        let mut line = format!("| {round} |");
        for (i, (_, app, case, over, target)) in ROWS.iter().enumerate() {
            let ratio = find(round, app, case).and_then(|sample| {
                let base = match over {
                    Some(bare) => find(round, app, bare),
                    None => find(round, REFERENCE, "paid"),
                }?;
                Some(sample.wrk.per_second / base.wrk.per_second)
            });
            match ratio {
                Some(ratio) => {
                    if target.is_some_and(|target| ratio >= target) {
                        met[i] += 1;
                    }
                    line.push_str(&format!(" {ratio:.3} |"));
                }
                None => line.push_str(" – |"),
            }
        }
        println!("{line}");
    }
    for (i, (label, _, _, _, target)) in ROWS.iter().enumerate() {
        if let Some(target) = target {
            println!(
                "{label}: ≥ {target}× in {} of {} rounds",
                met[i],
                rounds.len()
            );
        }
    }
}
