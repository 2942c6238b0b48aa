"""Robust aggregation (median, trimmed mean, Krum, MultiKrum, Bulyan) and update hygiene (deltas
against the global model, norm clipping, Gaussian noise), streamed across the uploads.

Every upload is first checked by the native FedAvg kernel (structure, finite values, weight); its
files stay open (or its bytes held) and its values are then read again chunk by chunk with
``pread``, never all at once: each sweep holds one chunk of every upload, an ``N x chunk`` matrix
of at most ``chunk_bytes`` bytes (the knob: float64 values, or the stored values for the median
and trimmed mean, which are read and reduced natively by ``_native.reduce_slots``), so memory is
O(N x chunk) + O(one model) for the result, never O(N x model). Definitions follow Flower's
``flwr.server.strategy.aggregate`` functions (tests compare against them); see docs/federated.md
for each method and its cost.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _native
from ._fedavg import slot_arrays
from .errors import AggregationError

METHODS = ("fedavg", "median", "trimmed_mean", "krum", "multi_krum", "bulyan")
#: float64 bytes of one chunk across all uploads (the ``chunk_bytes`` knob's default)
DEFAULT_CHUNK_BYTES = 64 << 20
_MIN_CHUNK = 1024  # lanes: fewer per upload would make the per-read cost dominate

Matrix = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Options:
    """How to aggregate: the method and its parameters, and the update hygiene."""

    method: str = "fedavg"
    trim: float = 0.1
    byzantine: int = 0
    keep: int | None = None
    clip_norm: float | None = None
    noise_multiplier: float | None = None
    seed: int | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    @property
    def plain(self) -> bool:
        """FedAvg without hygiene: the one-pass native path."""
        return self.method == "fedavg" and self.clip_norm is None and self.noise_multiplier is None

    def check(self) -> None:
        """Every option checked on entry, before an upload is read: type, NaN, +-inf and range
        (``ValueError``; the CLI passes its options here too)."""
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {self.method!r}")
        trim = real_option("trim", self.trim)
        if not 0.0 <= trim < 0.5:
            raise ValueError(f"trim must be in [0, 0.5) (the share cut at each side); got {self.trim}")
        if integer_option("byzantine", self.byzantine) < 0:
            raise ValueError(f"byzantine must be >= 0; got {self.byzantine}")
        if self.keep is not None and integer_option("keep", self.keep) < 1:
            raise ValueError(f"keep must be >= 1; got {self.keep}")
        if self.clip_norm is not None and not real_option("clip_norm", self.clip_norm) > 0:
            raise ValueError(f"clip_norm must be positive; got {self.clip_norm}")
        if self.noise_multiplier is not None:
            if self.clip_norm is None:
                raise ValueError("noise_multiplier needs clip_norm (the noise scales with the clipping norm)")
            if real_option("noise_multiplier", self.noise_multiplier) < 0:
                raise ValueError(f"noise_multiplier must be >= 0; got {self.noise_multiplier}")
            if not math.isfinite(float(self.noise_multiplier) * float(self.clip_norm)):
                raise ValueError(
                    f"noise_multiplier * clip_norm = {self.noise_multiplier} * {self.clip_norm} overflows "
                    "float64: the noise's standard deviation would be infinite"
                )
        if self.seed is not None and integer_option("seed", self.seed) < 0:
            raise ValueError(f"seed must be >= 0; got {self.seed}")
        if not 8 <= integer_option("chunk_bytes", self.chunk_bytes) <= sys.maxsize:
            raise ValueError(f"chunk_bytes must be in [8, {sys.maxsize}]; got {self.chunk_bytes}")


def real_option(name: str, value: object) -> float:
    """``value`` as a finite float, else ``ValueError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number; got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    return number


def integer_option(name: str, value: object) -> int:
    """``value`` as an int, else ``ValueError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer; got {value!r}")
    return int(value)


@dataclass
class Member:
    """An accepted upload, ready to be read again chunk by chunk."""

    index: int
    client: str
    weight: float
    reader: _native.LaneReader
    locations: list[tuple[int, int, bool, int]]
    norm: float = 0.0
    clipped: bool = False
    distance: float = 0.0
    krum_score: float | None = None
    selected: bool = True


class UpdateOverflow(Exception):
    """An upload's update (its values minus ``relative_to``'s) left float64 in this slot: finite
    values of opposite signs near the limit. ``overflowing`` finds every such upload."""

    def __init__(self, slot: int) -> None:
        super().__init__(f"an update overflows float64 in slot {slot}")
        self.slot = slot


def overflowing(members: list[Member], lanes: list[int], chunk_bytes: int, base: Member) -> dict[int, int]:
    """Position in ``members`` -> the first slot where that member's update against ``base`` is
    not finite in float64 (read again, chunk by chunk; called only after ``UpdateOverflow``)."""
    found: dict[int, int] = {}

    def visit(slot: int, start: int, x: Matrix) -> None:
        for row in np.flatnonzero(~np.isfinite(x).all(1)).tolist():
            found.setdefault(row, slot)

    _sweep(members, lanes, chunk_bytes, base, np.ones(len(members)), visit, stop_on_overflow=False)
    return found


@dataclass
class Outcome:
    """The aggregate per slot (float64 lanes) and what was computed about each member."""

    slots: list[Matrix] = field(default_factory=list)


def _sweep(
    members: list[Member],
    lanes: list[int],
    chunk_bytes: int,
    base: Member | None,
    scale: Matrix,
    visit: Callable[[int, int, Matrix], None],
    stop_on_overflow: bool = True,
) -> None:
    """Calls ``visit(slot, start, X)`` for every chunk of every slot, X the ``N x chunk`` float64
    values of the members (minus ``base``'s when given, times ``scale`` per member). An update
    against ``base`` that is not finite raises ``UpdateOverflow`` (unless ``stop_on_overflow`` is
    False: then ``visit`` sees it)."""
    per = max(_MIN_CHUNK, chunk_bytes // (8 * max(1, len(members))))
    readers = [m.reader for m in members]
    # one block for every chunk: a fresh one per chunk cost a page fault and the kernel's zeroing
    # of every page, each time (a tenth of a median's time)
    block = np.empty(len(members) * min(per, max(lanes, default=0)), np.float64)
    for slot, total in enumerate(lanes):
        for start in range(0, total, per):
            count = min(per, total - start)
            x = block[: len(members) * count].reshape(len(members), count)
            _native.read_rows(readers, [m.locations[slot] for m in members], start, x)
            if base is not None:
                with np.errstate(over="ignore", invalid="ignore"):
                    x -= base.reader.read(base.locations[slot], start, count)
                    finite = np.isfinite(x.sum())  # one cheap pass: a non-finite value makes it so
                if stop_on_overflow and not finite and not np.isfinite(x).all():
                    raise UpdateOverflow(slot)
            if not np.all(scale == 1.0):
                x *= scale[:, None]
            visit(slot, start, x)


def fedavg_sums(members: list[Member], lanes: list[int], chunk_bytes: int) -> list[Matrix]:
    """The FedAvg kernel's float64 sums of ``members`` (``weight x value`` added in their order,
    as ``_native.accumulate`` adds them), read again chunk by chunk: made only when an upload
    could overflow them (``PartialSum.check``)."""
    sums = slot_arrays(lanes, 0.0)

    def add(slot: int, start: int, x: Matrix) -> None:
        acc = sums[slot][start : start + x.shape[1]]
        for row, m in zip(x, members, strict=True):
            acc += row * m.weight

    _sweep(members, lanes, chunk_bytes, None, np.ones(len(members)), add)
    return sums


def _squares(x: Matrix) -> Matrix:
    """Each row's sum of squares. Finite values near float64's limit square to infinity: that is
    their norm (a diagnostic; clipping then scales such an upload to zero), not an error."""
    with np.errstate(over="ignore"):
        out: Matrix = (x * x).sum(1)
    return out


def _krum_scores(d: Matrix, byzantine: int) -> Matrix:
    """Flower's Krum score: the sum of each vector's n - f - 2 smallest distances to the others."""
    n = len(d)
    closest = max(1, n - byzantine - 2)
    return np.array([np.sum(d[i, np.argsort(d[i])[1 : closest + 1]]) for i in range(n)])


def _bulyan_select(d: Matrix, byzantine: int) -> list[int]:
    """Flower's Bulyan selection: n - 2f rounds of Krum, each removing its pick."""
    remaining = list(range(len(d)))
    chosen = []
    for _ in range(len(d) - 2 * byzantine):
        sub = d[np.ix_(remaining, remaining)]
        best = int(np.argmin(_krum_scores(sub, byzantine)))
        chosen.append(remaining.pop(best))
    return chosen


def too_few(options: Options, accepted: int) -> str | None:
    """Why ``accepted`` uploads are too few for the method (naming the shortfall), or None."""
    f = options.byzantine
    if options.method == "bulyan":
        need, why = 4 * f + 3, f"bulyan with byzantine={f} needs at least 4 * byzantine + 3"
    elif options.method == "multi_krum" and options.keep is not None:
        need, why = options.keep, f"multi_krum with keep={options.keep} needs at least keep"
    elif options.method == "multi_krum":
        need, why = (
            f + 1,
            f"multi_krum with byzantine={f} keeps n - byzantine uploads, so needs at least {f} + 1",
        )
    else:
        need, why = 1, f"{options.method} needs at least 1"
    if accepted >= need:
        return None
    return f"{why} = {need} accepted uploads; {accepted} were accepted ({need - accepted} short)"


def aggregate(members: list[Member], lanes: list[int], options: Options, base: Member | None) -> Outcome:
    """The aggregate of ``members`` per ``options``; fills each member's diagnostics. Raises
    ``AggregationError`` when the members are too few for the method (``too_few``) and
    ``UpdateOverflow`` when an update against ``base`` leaves float64."""
    n = len(members)
    o = options
    shortfall = too_few(o, n)
    if shortfall is not None:
        raise AggregationError(shortfall)
    ones = np.ones(n)
    squares = np.zeros(n)
    need_norms = o.clip_norm is not None
    if need_norms:

        def norms_of(slot: int, start: int, x: Matrix) -> None:
            squares[:] += _squares(x)

        _sweep(members, lanes, o.chunk_bytes, base, ones, norms_of)
    scale = ones
    if o.clip_norm is not None:
        norms = np.sqrt(squares)
        with np.errstate(divide="ignore"):
            scale = np.minimum(1.0, o.clip_norm / norms)  # Flower: min(1, c / norm)
    distances = np.zeros((n, n))
    if o.method in ("krum", "multi_krum", "bulyan"):

        def pairwise(slot: int, start: int, x: Matrix) -> None:
            _native.add_pairwise(x, distances)  # each pair once, on every core
            if not need_norms:
                squares[:] += _squares(x)

        _sweep(members, lanes, o.chunk_bytes, base, scale, pairwise)
    selected: list[int] = list(range(n))
    if o.method in ("krum", "multi_krum"):
        scores = _krum_scores(distances, o.byzantine)
        for m, score in zip(members, scores, strict=True):
            m.krum_score = float(score)
        if o.method == "krum":
            selected = [int(np.argmin(scores))]
        else:
            keep = o.keep if o.keep is not None else n - o.byzantine  # >= 1: too_few said so
            selected = [int(i) for i in np.argsort(scores)[::-1][n - keep :]]
    elif o.method == "bulyan":
        for m, score in zip(members, _krum_scores(distances, o.byzantine), strict=True):
            m.krum_score = float(score)
        selected = _bulyan_select(distances, o.byzantine)
    weights = np.array([m.weight for m in members])
    # every lane is assigned by the sweep below (a write, never read first: no zero-page faults,
    # see PartialSum.ensure in _fedavg.py)
    out = Outcome(slot_arrays(lanes, None))
    gaps = np.zeros(n)
    std = None
    if o.noise_multiplier is not None and o.clip_norm is not None:
        std = o.noise_multiplier * o.clip_norm / n  # Flower's compute_stdv
    rng = np.random.default_rng(o.seed)
    counted = need_norms or o.method in ("krum", "multi_krum", "bulyan")

    cut = int(o.trim * n) if o.method == "trimmed_mean" else 0  # Flower's int(trim * n)
    unused = np.zeros(n)

    def reduce(slot: int, start: int, x: Matrix) -> None:
        agg: Matrix
        if o.method in ("median", "trimmed_mean") and std is None:
            # one native pass: the statistic per column, each row's squares and distance to it
            agg = _native.reduce_block(x, o.method, cut, unused if counted else squares, gaps)
            if base is not None:
                agg = agg + base.reader.read(base.locations[slot], start, x.shape[1])
            out.slots[slot][start : start + x.shape[1]] = agg
            return
        if not counted:
            squares[:] += _squares(x)
        if o.method == "fedavg" or o.method == "multi_krum":
            rows = selected
            with np.errstate(over="ignore", invalid="ignore"):
                total = x[rows[0]] * weights[rows[0]]  # Flower's order: one upload after the other
                for r in rows[1:]:
                    total = total + x[r] * weights[r]
                agg = total / weights[rows].sum()
            if not np.isfinite(agg).all():  # the sum passed float64's limit; the mean does not
                share = weights[rows] / weights[rows].sum()
                agg = (x[rows] * share[:, None]).sum(0)
        elif o.method == "median":
            agg = _native.reduce_columns(x, "median")  # numpy's median, per column
        elif o.method == "trimmed_mean":
            agg = _native.reduce_columns(x, "trimmed_mean", cut)
        elif o.method == "krum":
            agg = x[selected[0]].copy()
        else:  # bulyan: per coordinate, the mean of the beta values closest to the selection's median
            y = x[selected]
            beta = len(selected) - 2 * o.byzantine
            med = _native.reduce_columns(np.ascontiguousarray(y), "median")
            order = np.argpartition(np.abs(med - y), kth=beta - 1, axis=0)
            kept = np.take_along_axis(y, order, axis=0)[:beta]
            with np.errstate(over="ignore", invalid="ignore"):
                agg = np.mean(kept, axis=0)
            if not np.isfinite(agg).all():  # the sum passed float64's limit; the mean does not
                agg = (kept / beta).sum(0)
        if std is not None:
            agg = agg + rng.normal(0.0, std, agg.shape)
        with np.errstate(over="ignore"):  # a distance beyond float64 is infinite (see _squares)
            diff = x - agg
            gaps[:] += np.einsum("ij,ij->i", diff, diff)
        if base is not None:
            agg = agg + base.reader.read(base.locations[slot], start, x.shape[1])
        out.slots[slot][start : start + x.shape[1]] = agg

    native = (
        o.method in ("median", "trimmed_mean") and std is None and base is None and bool(np.all(scale == 1.0))
    )
    if native:
        # read and reduced natively, slot by slot: up to NETWORK_UP_TO uploads in one pass through
        # the cache (no chunk block at all), beyond that chunk by chunk as the files store the
        # values (no float64 block)
        readers = [m.reader for m in members]
        where = [[m.locations[slot] for m in members] for slot in range(len(lanes))]
        rows_squares = unused if counted else squares
        _native.reduce_slots(readers, where, o.method, cut, out.slots, rows_squares, gaps, o.chunk_bytes)
    else:
        _sweep(members, lanes, o.chunk_bytes, base, scale, reduce)
    # every read of the round is done: an upload changed in place since its check (its size or
    # modification time) fails the round, since values read from it may be in the result
    for m in [*members, *([base] if base is not None else [])]:
        m.reader.confirm_unchanged()
    chosen = set(selected)
    for i, m in enumerate(members):
        m.norm = float(np.sqrt(squares[i]))
        m.clipped = bool(scale[i] < 1.0)
        m.distance = float(np.sqrt(gaps[i]))
        m.selected = i in chosen
    return out
