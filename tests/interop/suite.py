"""A tiny named-check runner: each check is a function that raises on failure.

A check may name checks it needs; when one of those failed, it fails too without running
(its reason says which). Results print one line each (`PASS name` / `FAIL name: reason`).
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class CheckFailed(AssertionError):
    """Raised by `expect` with a message that reads well on one line."""


def expect(condition: bool, message: str) -> None:
    """Fails the running check with `message` unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


@dataclass
class Check:
    name: str
    run: Callable[[], Any]
    needs: tuple[str, ...] = ()


@dataclass
class Suite:
    checks: list[Check] = field(default_factory=list)
    outcomes: dict[str, str | None] = field(default_factory=dict)  # name -> None (pass) or reason

    def check(self, name: str, *needs: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
        """Decorator registering a check, run in registration order."""

        def register(function: Callable[[], Any]) -> Callable[[], Any]:
            self.checks.append(Check(name, function, needs))
            return function

        return register

    def run(self, only: Callable[[str], bool] = lambda name: True) -> tuple[int, int]:
        for check in self.checks:
            if not only(check.name):
                continue
            failed_needs = [n for n in check.needs if self.outcomes.get(n, "not run") is not None]
            started = time.monotonic()
            if failed_needs:
                reason: str | None = f"not attempted: needs {', '.join(failed_needs)}"
            else:
                reason = _attempt(check.run)
            if reason is not None:
                reason = " ".join(reason.split())  # one line per check
            self.outcomes[check.name] = reason
            elapsed = time.monotonic() - started
            if reason is None:
                print(f"PASS {check.name} ({elapsed:.1f}s)", flush=True)
            else:
                print(f"FAIL {check.name}: {reason}", flush=True)
        passed = sum(1 for r in self.outcomes.values() if r is None)
        return passed, len(self.outcomes) - passed


def _attempt(function: Callable[[], Any]) -> str | None:
    try:
        result = function()
        if inspect.iscoroutine(result):
            asyncio.run(result)
    except CheckFailed as failure:
        return str(failure)
    except Exception as error:  # any other exception is a failure with its origin
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return f"{type(error).__name__}: {error} (at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
    return None
