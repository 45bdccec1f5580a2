//! Running wrk and reading what it printed.

use std::path::Path;
use std::process::Command;

/// What one wrk run measured.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WrkResult {
    pub(crate) requests: u64,
    pub(crate) per_second: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) non_2xx: u64,
    pub(crate) socket_errors: u64,
}

/// Runs wrk against `url` for `seconds` with `script` (a Lua file) when given.
pub(crate) fn run(
    url: &str,
    seconds: u64,
    threads: u32,
    connections: u32,
    script: Option<&Path>,
) -> Result<WrkResult, String> {
    let mut command = Command::new("wrk");
    command
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg("--latency");
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let output = command
        .arg(url)
        .output()
        .map_err(|error| format!("could not run wrk ({error}); benches/load/run.sh installs it"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk failed: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(&text).ok_or_else(|| format!("unexpected wrk output:\n{text}"))
}

fn parse(text: &str) -> Option<WrkResult> {
    let mut result = WrkResult::default();
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(rate)) => result.per_second = rate.parse().ok()?,
            (Some("50%"), Some(latency)) => result.p50_us = micros(latency)?,
            (Some("99%"), Some(latency)) => result.p99_us = micros(latency)?,
            (Some("Non-2xx"), _) => result.non_2xx = line.rsplit(' ').next()?.parse().ok()?,
            (Some("Socket"), _) => {
                result.socket_errors = line
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse::<u64>().ok())
                    .sum()
            }
            (Some(count), Some("requests")) => result.requests = count.parse().ok()?,
            _ => {}
        }
    }
    (result.per_second > 0.0).then_some(result)
}

/// `1.23ms`, `850.00us` or `1.01s` in microseconds.
fn micros(latency: &str) -> Option<f64> {
    let split = latency.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = latency.split_at(split);
    let number: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => number,
        "ms" => number * 1e3,
        "s" => number * 1e6,
        "m" => number * 60e6,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_wrk_prints() {
        let text = "Running 1s test @ http://127.0.0.1:1/bare\n  2 threads and 64 connections\n  Latency Distribution\n     50%  436.00us\n     75%  1.00ms\n     90%  2.00ms\n     99%    3.10ms\n  61234 requests in 1.00s, 7.1MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n  Non-2xx or 3xx responses: 61234\nRequests/sec:  61234.50\nTransfer/sec:      7.1MB\n";
        let result = parse(text).unwrap();
        assert_eq!(result.requests, 61234);
        assert_eq!(result.non_2xx, 61234);
        assert_eq!(result.socket_errors, 3);
        assert!((result.p50_us - 436.0).abs() < 1e-9);
        assert!((result.p99_us - 3100.0).abs() < 1e-9);
        assert!((result.per_second - 61234.5).abs() < 1e-9);
    }
}
