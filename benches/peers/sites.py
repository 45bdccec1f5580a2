#!/usr/bin/env python3
"""What a middleware allocates for, per request: reads the dhat JSON files the allocation harness
writes with ALLOCATION_SITES=DIR (benches/peers/src/allocations.rs) and prints, for each counted
run given, its blocks and bytes per request grouped by the innermost function of the middleware
(or of its in-process facilitator) on each allocation's stack; blocks allocated with no such
function on the stack (the router, the handler, the runtime) are grouped as "outside".

    python3 benches/peers/sites.py DIR/x402-axum-paid.json [--top N] [--requests 200]
"""

import argparse
import json
import re
from collections import defaultdict

# The crates of the middlewares measured and of their instant facilitators.
MIDDLEWARE = re.compile(
    r"\b(tower_x402|x402_wire|x402_axum|x402_types|x402_chain_eip155|r402\w*|x402_peers::instant)::"
)
FACILITATOR = re.compile(r"^<?(x402_peers::instant::|tower_x402_benches::InstantFacilitator)")


def function(frame):
    """The function name of a dhat frame `0xADDR: NAME (FILE:LINE:COL)`."""
    name = frame.split(": ", 1)[-1]
    return re.sub(r" \([^()]*\)$", "", name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    for path in args.files:
        with open(path) as file:
            profile = json.load(file)
        frames = profile["ftbl"]
        blocks = defaultdict(int)
        size = defaultdict(int)
        for point in profile["pps"]:
            names = [function(frames[index]) for index in point["fs"]]
            inside = [name for name in names if MIDDLEWARE.search(name)]
            if not inside:
                label = "outside the middleware"
            elif FACILITATOR.search(inside[0]):
                label = "the instant facilitator: " + inside[0]
            else:
                label = inside[0]
            blocks[label] += point["tbk"]
            size[label] += point["tb"]
        total = sum(blocks.values())
        print(f"{path}: {total / args.requests:g} blocks per request")
        ranked = sorted(blocks, key=lambda label: -blocks[label])
        for label in ranked[: args.top]:
            print(
                f"  {blocks[label] / args.requests:7g} blocks {size[label] / args.requests:8g} bytes  {label[:150]}"
            )
        rest = ranked[args.top :]
        if rest:
            print(
                f"  {sum(blocks[l] for l in rest) / args.requests:7g} blocks in {len(rest)} other functions"
            )


if __name__ == "__main__":
    main()
