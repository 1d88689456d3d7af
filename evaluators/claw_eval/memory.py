"""The run's memory budget for Claw-Eval sandboxes: what the episodes in flight may hold together.

Each trial's sandbox has a memory limit (``memory_mb``, 2 GiB; ``browser_memory_mb``, 16 GiB, for
a web-page task whose snapshot script runs Chromium: the watchdog counts the shared memory Chromium
maps at its mapped size). Those limits bind one sandbox; with ``--max-in-flight 8`` eight browser
trials could be admitted at once, 128 GiB on a 23 GiB host. So a trial *reserves* its sandbox's
limit from the adapter's budget before its sandbox starts and gives it back when it stops::

    sum over trials in flight of limit_t  <=  budget_mb
    budget_mb = memory_budget_mb, or 75% of the host's MemTotal (the rest: this process, the
                model, the services and the graders)

A trial whose reservation does not fit waits (in its worker thread) until enough is given back;
one whose limit is larger than the whole budget can never fit: its task is skipped, the setting
named. The budget records the most it had reserved at once and how many browser trials were in
flight together (the aggregate reports both).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

HOST_SHARE = 0.75
"""Share of the host's memory the sandboxes of one run may reserve together by default."""


def host_memory_mb() -> int:
    """The host's ``MemTotal`` in MiB (``sysconf`` where there is no ``/proc/meminfo``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)


def default_budget_mb() -> int:
    return int(host_memory_mb() * HOST_SHARE)


@dataclass
class Reservation:
    """Memory held by one trial's sandbox until :meth:`MemoryBudget.release`."""

    mb: int
    browser: bool
    waited_s: float = 0.0


@dataclass
class MemoryBudget:
    """Reservations of sandbox memory limits against ``total_mb`` (module docstring). Thread-safe."""

    total_mb: int
    reserved_mb: int = 0
    browsers: int = 0
    peak_mb: int = 0
    peak_browsers: int = 0
    waits: int = 0
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def fits(self, mb: int) -> bool:
        """Whether a reservation of ``mb`` can ever be granted."""
        return mb <= self.total_mb

    def reserve(self, mb: int, *, browser: bool = False, timeout_s: float | None = None) -> Reservation:
        """Block until ``mb`` more fit, then hold them. Raises ValueError for more than the whole
        budget and TimeoutError after ``timeout_s`` without room."""
        if not self.fits(mb):
            raise ValueError(f"a sandbox of {mb} MiB does not fit the run's memory budget of {self.total_mb} MiB")
        start = time.monotonic()
        with self._cond:
            if self.reserved_mb + mb > self.total_mb:
                self.waits += 1
            if not self._cond.wait_for(lambda: self.reserved_mb + mb <= self.total_mb, timeout=timeout_s):
                raise TimeoutError(f"no room for a {mb} MiB sandbox in the run's memory budget of {self.total_mb} MiB "
                                   f"({self.reserved_mb} MiB reserved) after {timeout_s:.0f}s")
            self.reserved_mb += mb
            self.browsers += int(browser)
            self.peak_mb = max(self.peak_mb, self.reserved_mb)
            self.peak_browsers = max(self.peak_browsers, self.browsers)
        return Reservation(mb, browser, round(time.monotonic() - start, 3))

    def release(self, reservation: Reservation) -> None:
        with self._cond:
            self.reserved_mb -= reservation.mb
            self.browsers -= int(reservation.browser)
            self._cond.notify_all()

    def report(self) -> dict:
        """What the aggregate records: the budget, the most reserved at once, browser trials together."""
        return {"budget_mb": self.total_mb, "peak_reserved_mb": self.peak_mb,
                "peak_browser_trials_in_flight": self.peak_browsers, "trials_that_waited": self.waits}
