"""Runs the interoperability checks and writes `passed failed` to the results file.

`--offline` runs only the checks of the Python side. Otherwise the store checks read the
running services' URLs from the environment (see `store_checks.Services`), as `run.sh` sets.
`X402_INTEROP_ONLY` (comma-separated substrings of check names) runs only the checks it names,
for working on a few of them; CI leaves it unset and runs every check.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import offline_checks
from suite import Suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="only the checks of the Python side")
    parser.add_argument("--results", type=Path, help="file receiving '<passed> <failed>'")
    args = parser.parse_args()
    # The official scheme logs expected refusals (e.g. an unfunded payer) as warnings.
    logging.basicConfig(level=logging.ERROR)

    suite = Suite()
    offline_checks.register(suite)
    if not args.offline:
        import sandbox_checks
        import store_checks
        import mcp_checks
        import siwx_checks
        import upto_checks
        import channels_checks
        import channels_crash_checks
        import permit2_checks
        import solana_checks

        services = store_checks.Services.from_env()
        sandbox_checks.register(suite, services.sandbox_facilitator)
        store_checks.register(suite, services)
        upto_checks.register(suite)  # metered payments: the example `metered`
        permit2_checks.register(suite)  # `exact` through Permit2: the store with STORE_PERMIT2=1
        mcp_checks.register(suite)  # paid MCP tools: the example `paid_mcp`
        # Solana: the official SVM client, the sandbox facilitator process and its Solana RPC.
        solana_checks.register(suite, services.sandbox_facilitator)
        siwx_checks.register(suite, services)  # sign-in-with-x, both ways: the `siwx-proof` binary of `x402-buyer`
        # A channels example killed mid-claim, restarted and stopped; before the checks below,
        # which move the sandbox chain's clock.
        channels_crash_checks.register(suite)
        # Payment channels: the example `channels`; last, as its final check stops the example.
        channels_checks.register(suite)
    wanted = [part for part in os.environ.get("X402_INTEROP_ONLY", "").split(",") if part]
    passed, failed = suite.run(lambda name: not wanted or any(part in name for part in wanted))
    if args.results:
        args.results.write_text(f"{passed} {failed}\n")
    else:
        print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
