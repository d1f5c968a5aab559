"""Aligning a :class:`~.clean.GridSignal` to trace time: trace seconds τ (τ = 0 is the trace's first submission)
map onto grid time by a rule (same weekday and hour, or a fixed offset), and an :class:`AlignedSignal` integrates the
signal exactly over trace intervals with a cumulative sum (docs/signals.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import numpy as np

from ...core.errors import UnknownNameError, WattschedError
from .catalog import ALIGN_RULES, EUR_TO_USD, HOUR_S, WRAP_MODES
from .clean import GridSignal

if TYPE_CHECKING:
    import pandas as pd

# --- alignment ------------------------------------------------------------------------------------


def _as_utc(dt: datetime) -> datetime:
    # Naive datetimes are read as UTC, as the parameter names say.
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def first_matching(year: int, tz: str, weekday: int, clock: time) -> datetime:
    """First instant of local calendar year `year` in `tz` with local weekday `weekday` (Monday = 0) and
    wall-clock time `clock`, in UTC. Always within 1-7 January."""
    zone = ZoneInfo(tz)
    for day in range(1, 8):
        candidate = datetime.combine(datetime(year, 1, day).date(), clock, tzinfo=zone)
        if candidate.weekday() == weekday:
            return candidate.astimezone(UTC)
    raise AssertionError("unreachable: every weekday occurs in 1-7 January")


@dataclass(frozen=True, eq=False)
class AlignedSignal:
    """A GridSignal seen from trace time: τ seconds after the trace's first submission is grid instant
    ``anchor_utc + τ`` (elapsed seconds), wrapped per `wrap` past the end of the year."""

    signal: GridSignal
    anchor_utc: datetime
    rule: str
    wrap: str
    trace_start_utc: datetime | None
    trace_tz: str
    wrap_to_utc: datetime  # where `cycle_year` continues once grid time reaches signal.end_utc

    if TYPE_CHECKING:  # derived in __post_init__; at run time not dataclass fields
        _v: np.ndarray = field(init=False)
        _cum: np.ndarray = field(init=False)
        _a: float = field(init=False)
        _end: float = field(init=False)
        _w: float = field(init=False)

    def __post_init__(self) -> None:
        v = np.asarray(self.signal.values, dtype=np.float64)
        cum = np.concatenate(([0.0], np.cumsum(v * HOUR_S)))
        object.__setattr__(self, "_v", v)
        object.__setattr__(self, "_cum", cum)
        object.__setattr__(self, "_a", (self.anchor_utc - self.signal.start_utc).total_seconds())
        object.__setattr__(self, "_end", self.signal.hours * HOUR_S)
        object.__setattr__(self, "_w", (self.wrap_to_utc - self.signal.start_utc).total_seconds())

    # Seconds since signal.start_utc are called "grid seconds" below.
    @property
    def span_s(self) -> float:
        """Trace seconds that fit before the year ends (wrap="error" raises beyond this)."""
        return self._end - self._a

    @property
    def period_s(self) -> float:
        """Length of the repeated block [wrap_to_utc, end) for wrap="cycle_year"."""
        return self._end - self._w

    def _tau(self, tau: Any) -> np.ndarray:
        t = np.asarray(tau, dtype=np.float64)
        if not np.all(np.isfinite(t)):
            raise ValueError("trace times must be finite")
        if np.any(t < 0):
            raise ValueError(f"trace times must be >= 0 (τ = 0 is the first submission), got {t.min()}")
        return t

    def _past_end(self, t: np.ndarray, inclusive_end: bool) -> None:
        over = t > self.span_s if inclusive_end else t >= self.span_s
        if self.wrap == "error" and np.any(over):
            s = self.signal
            longest = float(t.max())
            raise WattschedError(
                f"trace time {longest:.0f} s ({longest / 86400:.2f} days) runs past the end of the {s.region} "
                f"{s.year} {s.name} series ({s.start_utc:%Y-%m-%d %H:%M} .. {s.end_utc:%Y-%m-%d %H:%M} UTC, "
                f"{s.hours} h); anchored at {self.anchor_utc:%Y-%m-%d %H:%M} UTC only {self.span_s:.0f} s "
                f"({self.span_s / 86400:.2f} days) of trace fit; use wrap='cycle_year' or a shorter trace"
            )

    def grid_seconds(self, tau: Any) -> np.ndarray:
        """Grid seconds (since signal.start_utc) of trace times τ, wrapped into [0, end)."""
        t = self._tau(tau)
        self._past_end(t, inclusive_end=False)
        g = self._a + t
        past = g >= self._end
        if np.any(past):
            g = np.where(past, self._w + np.mod(g - self._end, self.period_s), g)
        return g

    def grid_time_utc(self, tau: Any) -> pd.DatetimeIndex:
        import pandas as pd

        g = np.atleast_1d(self.grid_seconds(tau))
        return pd.DatetimeIndex(pd.Timestamp(self.signal.start_utc) + pd.to_timedelta(g, unit="s"))

    def value_at(self, tau_seconds: Any) -> np.ndarray:
        """Signal value at trace times τ: hourly step, the interval-start value holds for the whole hour."""
        g = self.grid_seconds(tau_seconds)
        k = np.minimum((g // HOUR_S).astype(np.int64), len(self._v) - 1)
        return self._v[k]

    def _prefix(self, g: np.ndarray) -> np.ndarray:
        """∫ signal over grid seconds [0, g] for g in [0, end]."""
        k = np.minimum((g // HOUR_S).astype(np.int64), len(self._v) - 1)
        return self._cum[k] + self._v[k] * (g - k * HOUR_S)

    def _antiderivative(self, t: np.ndarray) -> np.ndarray:
        """∫ signal over trace seconds [0, t]."""
        g = self._a + t
        f_a = self._prefix(np.asarray(self._a))
        inside = np.minimum(g, self._end)
        out = self._prefix(inside) - f_a
        past = g > self._end
        if np.any(past):
            extra = np.where(past, g - self._end, 0.0)
            cycles = np.floor(extra / self.period_s)
            rest = extra - cycles * self.period_s
            f_w = self._prefix(np.asarray(self._w))
            block = self._cum[-1] - f_w
            out = out + np.where(past, cycles * block + self._prefix(self._w + rest) - f_w, 0.0)
        return out

    def integral(self, t0: Any, t1: Any) -> np.ndarray:
        """∫ signal dτ over trace seconds [t0, t1] (unit × seconds), exact for the hourly step function, O(1)
        per interval; arrays broadcast."""
        a, b = self._tau(t0), self._tau(t1)
        self._past_end(np.maximum(a, b), inclusive_end=True)
        return self._antiderivative(b) - self._antiderivative(a)

    def cost_usd(self, power_w: Any, t0: Any, t1: Any) -> np.ndarray:
        """USD for constant `power_w` watts over trace seconds [t0, t1]: P · ∫ price[USD/MWh] dτ / 3.6e9."""
        if self.signal.kind != "price":
            raise WattschedError(f"cost_usd needs a price signal, not {self.signal.name}")
        if self.signal.unit != "USD/MWh":
            raise WattschedError(
                f"{self.signal.region} price is in {self.signal.unit}; convert it with load_price(..., "
                f"to_usd=True) or signal.to_usd() (fixed {EUR_TO_USD} USD/EUR) before computing USD"
            )
        return np.asarray(power_w, dtype=np.float64) * self.integral(t0, t1) / 3.6e9

    def co2_kg(self, power_w: Any, t0: Any, t1: Any) -> np.ndarray:
        """kgCO2eq for constant `power_w` watts over [t0, t1]: P · ∫ CI[g/kWh] dτ / 3.6e6 g, / 1000 for kg."""
        if self.signal.kind != "carbon":
            raise WattschedError(f"co2_kg needs a carbon-intensity signal, not {self.signal.name}")
        return np.asarray(power_w, dtype=np.float64) * self.integral(t0, t1) / 3.6e9

    def describe(self) -> dict[str, Any]:
        """Everything needed to reproduce the mapping, for summary.json."""
        s = self.signal
        zone = ZoneInfo(s.tz)
        if self.trace_start_utc is None:
            assumption = "relative-time trace: τ = 0 is taken as Monday 00:00 local time (region time zone)"
        else:
            assumption = f"trace calendar start read in {self.trace_tz}"
        return {
            "signal": s.name,
            "kind": s.kind,
            "unit": s.unit,
            "region": s.region,
            "year": s.year,
            "tz": s.tz,
            "rule": self.rule,
            "wrap": self.wrap,
            "trace_start_utc": None if self.trace_start_utc is None else self.trace_start_utc.isoformat(),
            "trace_start_assumption": assumption,
            "anchor_utc": self.anchor_utc.isoformat(),
            "anchor_local": self.anchor_utc.astimezone(zone).isoformat(),
            "series_start_utc": s.start_utc.isoformat(),
            "series_end_utc": s.end_utc.isoformat(),
            "trace_span_before_wrap_s": self.span_s,
            "wrap_to_utc": self.wrap_to_utc.isoformat(),
            "wrap_to_local": self.wrap_to_utc.astimezone(zone).isoformat(),
            "wrap_period_s": self.period_s,
            "value_convention": "hourly step: the interval-start value holds for the whole hour",
            "report": s.report,
            "attribution": s.attribution,
        }


def align(
    signal: GridSignal,
    trace_start_utc: datetime | None = None,
    rule: str = "weekday_hour",
    grid_start: datetime | None = None,
    wrap: str = "cycle_year",
    *,
    trace_tz: str = "UTC",
    trace_length_s: float | None = None,
) -> AlignedSignal:
    """Map trace time onto `signal`'s year (docs/datasets.md §2.1).

    * ``weekday_hour``: the anchor is the first instant of the signal's local year whose local weekday and
      wall-clock time (hour, minute, second) equal the trace start's in `trace_tz` (default UTC); a trace without
      a calendar start (``trace_start_utc=None``) starts Monday 00:00 local time.
    * ``offset``: the anchor is `grid_start` (within the signal's year).
    * ``cycle_year``: when grid time reaches the year end E it continues at the first instant of the year with the
      same local weekday and wall-clock time as E, and repeats [that instant, E) as often as needed.
      ``error``: reading past E raises (at once if `trace_length_s` is given and does not fit).
    """
    if rule not in ALIGN_RULES:
        raise UnknownNameError("alignment rule", rule, ALIGN_RULES)
    if wrap not in WRAP_MODES:
        raise UnknownNameError("wrap mode", wrap, WRAP_MODES)
    start = None if trace_start_utc is None else _as_utc(trace_start_utc)
    if rule == "weekday_hour":
        if grid_start is not None:
            raise WattschedError("grid_start is only used with rule='offset'")
        if start is None:
            weekday, clock = 0, time(0, 0)
        else:
            local = start.astimezone(ZoneInfo(trace_tz))
            weekday, clock = local.weekday(), local.time().replace(tzinfo=None)
        anchor = first_matching(signal.year, signal.tz, weekday, clock)
    else:
        if grid_start is None:
            raise WattschedError("rule='offset' needs grid_start (a time inside the signal's year)")
        anchor = _as_utc(grid_start)
    if not signal.start_utc <= anchor < signal.end_utc:
        raise WattschedError(
            f"grid anchor {anchor.isoformat()} is outside the {signal.region} {signal.year} series "
            f"({signal.start_utc.isoformat()} .. {signal.end_utc.isoformat()})"
        )
    end_local = signal.end_utc.astimezone(ZoneInfo(signal.tz))
    wrap_to = first_matching(
        signal.year, signal.tz, end_local.weekday(), end_local.time().replace(tzinfo=None)
    )
    aligned = AlignedSignal(signal, anchor, rule, wrap, start, trace_tz, wrap_to)
    if trace_length_s is not None:
        aligned._past_end(np.asarray([float(trace_length_s)]), inclusive_end=True)
    return aligned
