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

/// Seconds `pid`'s threads have spent on a CPU so far, to the nanosecond: the sum of each live
/// thread's `/proc/<pid>/task/<tid>/schedstat` (ticks of [`cpu_seconds`] are 10 ms apart, too
/// coarse for a hundred requests).
pub(crate) fn run_seconds(pid: &str) -> Result<f64, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|error| format!("{dir}: {error}"))?;
    let mut nanoseconds = 0u64;
    for task in tasks.flatten() {
        let path = task.path().join("schedstat");
        // A thread that ended meanwhile has no file any more: its time is not counted.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        nanoseconds += stat
            .split_whitespace()
            .next()
            .and_then(|field| field.parse::<u64>().ok())
            .ok_or_else(|| format!("{}: no run time", path.display()))?;
    }
    Ok(nanoseconds as f64 / 1e9)
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

/// Context switches (voluntary and not) of every thread of `pid` so far.
pub(crate) fn context_switches(pid: &str) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|error| format!("{dir}: {error}"))?;
    let mut switches = 0;
    for task in tasks.flatten() {
        // A thread that ended meanwhile is skipped.
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        switches += status
            .lines()
            .filter_map(|line| {
                line.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|value| value.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    Ok(switches)
}

/// `perf stat` counting cache misses of a process for a while, when the machine allows it.
pub(crate) struct CacheMisses(std::process::Child);

impl CacheMisses {
    /// Starts counting `pid`'s cache misses for `seconds`; `None` without `perf`.
    pub(crate) fn start(pid: &str, seconds: u64) -> Option<Self> {
        std::process::Command::new("perf")
            .args([
                "stat",
                "-x,",
                "-e",
                "cache-misses",
                "-p",
                pid,
                "--",
                "sleep",
            ])
            .arg(seconds.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()
            .map(Self)
    }

    /// The count, once `perf` has ended; `None` when the counter is not supported here (a
    /// virtual machine without a PMU).
    pub(crate) fn finish(self) -> Option<u64> {
        let output = self.0.wait_with_output().ok()?;
        let text = String::from_utf8_lossy(&output.stderr);
        text.lines()
            .find(|line| line.contains("cache-misses"))
            .and_then(|line| line.split(',').next())
            .and_then(|count| count.trim().parse().ok())
    }
}
