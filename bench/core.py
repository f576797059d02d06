"""The bench's framework: a registry of figures, time bounds, interleaving, the record and the table.

A figure is one number of ours beside one number of a baseline measured in the
same run, interleaved with it (A B B A …), so load from elsewhere on the
machine lands on both sides and their ratio stays meaningful when the absolute
numbers do not. A module registers figures with `@figure(...)`; every module
of the `bench` package is imported, so a figure in a new module needs nothing
else:

    @figure("bulk_5000", budget=90, order=60)
    def bulk(ctx: Context) -> list[Record]:
        ...
        return [record("bulk_5000", value=…, unit="ms", baseline="…", baseline_value=…,
                       target_ratio=1.5, better="lower")]

Each figure runs within its `budget` seconds: it is told its deadline
(`ctx.deadline`, `ctx.left()`) and must stop measuring by then; a figure still
running at twice its budget is interrupted (SIGALRM) and reported as a timeout.
"""

from __future__ import annotations

import importlib
import math
import os
import pkgutil
import signal
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
# Under the state directory the console uses (CONSOLE_VAR, default var/).
BENCH_DIR = Path(os.environ.get("CONSOLE_VAR") or BASE_DIR / "var") / "bench"

# The record of one figure: exactly these keys go to var/bench/results.json.
RECORD_KEYS = ("name", "value", "unit", "baseline", "baseline_value", "ratio", "target_ratio", "better")


@dataclass
class Record:
    name: str
    value: float | None
    unit: str
    baseline: str
    baseline_value: float | None
    target_ratio: float | None
    better: str  # "lower" | "higher"
    note: str = ""  # printed in the table, not written to results.json

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline_value:
            return None
        return self.value / self.baseline_value

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "not measured"
        if self.ratio is None:
            return "no baseline"
        if self.target_ratio is None:
            return "report"
        met = self.ratio <= self.target_ratio * 1.0000001 if self.better == "lower" else self.ratio >= self.target_ratio
        return "meets goal" if met else "misses goal"

    def as_json(self) -> dict:
        data = {
            "name": self.name,
            "value": _round(self.value),
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_value": _round(self.baseline_value),
            "ratio": _round(self.ratio, 4),
            "target_ratio": self.target_ratio,
            "better": self.better,
        }
        assert tuple(data) == RECORD_KEYS
        return data


def _round(value, digits: int = 3):
    if value is None:
        return None
    return round(float(value), digits)


def record(name: str, **fields) -> Record:
    return Record(name=name, **fields)


@dataclass
class Context:
    """What a figure gets: its deadline, the database vendor, and where to write scratch files."""

    vendor: str
    deadline: float
    budget: float
    scratch: Path
    server_url: str | None = None  # the PostgreSQL server (without the bench database), when on PostgreSQL

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0

    @property
    def postgres(self) -> bool:
        return self.vendor == "postgresql"


@dataclass
class Figure:
    names: tuple[str, ...]  # the records it produces, in order
    fn: Callable[[Context], list[Record]]
    budget: float
    order: int
    module: str
    group: str = ""  # the word on the command line that selects it (default: its module's last part)
    aliases: tuple[str, ...] = field(default_factory=tuple)


FIGURES: list[Figure] = []


def figure(*names: str, budget: float, order: int = 50, group: str = ""):
    """Register a function producing the records `names` within `budget` seconds."""

    def register(fn):
        module = fn.__module__
        FIGURES.append(
            Figure(
                names=names, fn=fn, budget=budget, order=order, module=module, group=group or module.rsplit(".", 1)[-1]
            )
        )
        return fn

    return register


def discover() -> list[Figure]:
    """Import every module of the bench package (each registers its figures) and list them in order."""
    import bench

    for info in pkgutil.iter_modules(bench.__path__):
        if info.name not in ("__main__", "core"):
            importlib.import_module(f"bench.{info.name}")
    seen, unique = set(), []
    for f in sorted(FIGURES, key=lambda f: (f.order, f.names)):
        if f.names not in seen:
            seen.add(f.names)
            unique.append(f)
    return unique


# --- time bounds ---------------------------------------------------------------------


class Timeout(Exception):
    pass


@contextmanager
def hard_limit(seconds: float):
    """Interrupt the block after `seconds` (SIGALRM, main thread only): a figure that ignores its deadline."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- statistics and interleaving ---------------------------------------------------------


def median(samples) -> float | None:
    samples = list(samples)
    return statistics.median(samples) if samples else None


def percentile(samples, p: float) -> float | None:
    ordered = sorted(samples)
    if not ordered:
        return None
    rank = max(0, math.ceil(p / 100 * len(ordered)) - 1)
    return ordered[min(rank, len(ordered) - 1)]


def interleave(ours: Callable[[], float], base: Callable[[], float], *, rounds: int, ctx: Context, reserve: float = 0):
    """Alternate the two measurements A B B A … until `rounds` pairs or the deadline (less `reserve`).

    Each callable measures once and returns its sample; returns the two sample lists.
    """
    a, b = [], []
    for i in range(rounds):
        if ctx.left() <= reserve and a and b:
            break
        first, second = (ours, base) if i % 2 == 0 else (base, ours)
        s1 = first()
        s2 = second()
        if i % 2 == 0:
            a.append(s1)
            b.append(s2)
        else:
            b.append(s1)
            a.append(s2)
    return a, b


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- the table --------------------------------------------------------------------------


def _num(value) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1000:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _goal(r: Record) -> str:
    if r.target_ratio is None:
        return "report"
    sign = "≤" if r.better == "lower" else "≥"
    if r.target_ratio == 1.0 and r.unit == "queries":
        sign = "="
    return f"{sign} {r.target_ratio:g}"


def table(records: list[Record]) -> str:
    rows = [("figure", "ours", "baseline", "ratio", "goal", "verdict")]
    for r in records:
        ours = f"{_num(r.value)} {r.unit}" if r.value is not None else "-"
        base = f"{r.baseline}: {_num(r.baseline_value)} {r.unit}" if r.baseline_value is not None else r.baseline
        ratio = f"{r.ratio:.3g}×" if r.ratio is not None else "-"
        rows.append((r.name, ours, base, ratio, _goal(r), r.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    widths[2] = min(widths[2], 70)
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(cell.ljust(w) if i < 5 else cell for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"  {r.name}: {r.note}" for r in records if r.note]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def markdown(records: list[Record]) -> str:
    """The same table as Markdown, for the README's Performance section."""
    lines = ["| figure | ours | baseline | ratio | goal | verdict |", "| --- | --- | --- | --- | --- | --- |"]
    for r in records:
        ours = f"{_num(r.value)} {r.unit}" if r.value is not None else "-"
        base = f"{r.baseline}: {_num(r.baseline_value)} {r.unit}" if r.baseline_value is not None else r.baseline
        ratio = f"{r.ratio:.3g}×" if r.ratio is not None else "-"
        lines.append(f"| `{r.name}` | {ours} | {base} | {ratio} | {_goal(r)} | {r.verdict} |")
    return "\n".join(lines)


def machine() -> str:
    import platform

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores{f' ({cpu})' if cpu else ''}, load {load:.2f}, Python {platform.python_version()}"
