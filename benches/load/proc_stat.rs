//! CPU time and resident memory of a process, from `/proc`.

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// User plus system CPU seconds used so far by `pid` (`self` for this process).
pub(crate) fn cpu_seconds(pid: &str) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|error| format!("{path}: {error}"))?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = |index: usize| -> Result<f64, String> {
        fields
            .get(index)
            .and_then(|field| field.parse::<f64>().ok())
            .ok_or_else(|| format!("{path}: no field {index}"))
    };
    Ok((ticks(11)? + ticks(12)?) / TICKS_PER_SECOND)
}

/// Resident memory of `pid` in KiB.
pub(crate) fn rss_kib(pid: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|error| format!("{path}: {error}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS"))
}
