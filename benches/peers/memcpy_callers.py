"""Reads `callgrind_annotate --tree=caller --show=D1mw` on stdin and prints memcpy's callers
with the most first-level data-cache write misses, per request (the count given as argument)."""

import re
import sys


def main() -> None:
    requests = int(sys.argv[1])
    lines = sys.stdin.read().split("\n")
    for index, line in enumerate(lines):
        if " * " in line and "__memcpy" in line:
            callers = []
            above = index - 1
            while above >= 0 and " < " in lines[above]:
                count = re.match(r"\s*([\d,.]+)", lines[above]).group(1)
                misses = 0 if count == "." else int(count.replace(",", ""))
                name = lines[above].split(" < ", 1)[1]
                name = re.sub(r" \[[^\]]*\]$", "", name).removeprefix("???:")
                calls = re.search(r" \(([\d,]+)x\)$", name)
                if calls:
                    per_request = int(calls.group(1).replace(",", "")) / requests
                    name = f"{name[: calls.start()]} ({per_request:g} copies a request)"
                callers.append((misses, name))
                above -= 1
            total = re.match(r"\s*([\d,.]+)", line).group(1).replace(",", "")
            print(f"  {int(total) / requests:8.0f}  memcpy, all callers")
            for misses, name in sorted(callers, reverse=True)[:10]:
                print(f"  {misses / requests:8.0f}  {name[-150:]}")
            return
    print("  memcpy not found in the profile")


main()
