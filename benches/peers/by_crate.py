"""Sums `perf report --sort dso,sym --stdio` by where each sample landed: the kernel, a shared
library, or the crate a symbol of the app belongs to (generic code by the crate it is about).

Arguments: the requests per second served while the profile was taken, and its length in
seconds; with them, the CPU time per request (a `cpu-clock` profile's event count is the
nanoseconds of CPU it sampled) and each share of it in microseconds."""

import re
import sys
from collections import Counter

CRATES = re.compile(
    r"(tower_x402|x402_axum|x402_types|hyper_util|hyper|reqwest|tokio|serde_json|serde_core|http"
    r"|bytes|axum|tower|h2|futures_util|url|indexmap|hashbrown|metrics|tracing)::"
)

rate, seconds = float(sys.argv[1]), float(sys.argv[2])
shares = Counter()
cpu_ns = 0.0
for line in sys.stdin:
    count = re.match(r"# Event count \(approx\.\): (\d+)", line)
    if count:
        cpu_ns = float(count.group(1))
    sample = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
    if not sample:
        continue
    share, dso, kind, symbol = sample.groups()
    if kind == "k":
        where = "kernel"
    elif dso.startswith("lib"):
        where = dso
    else:
        crate = CRATES.search(symbol)
        where = crate.group(1) if crate else "other (std, alloc, core, …)"
    shares[where] += float(share)
per_request_us = cpu_ns / (rate * seconds) / 1000
print(f"{per_request_us:7.1f} µs of CPU per request")
for where, share in shares.most_common(16):
    print(f"{share:6.2f} %  {share * per_request_us / 100:6.1f} µs  {where}")
