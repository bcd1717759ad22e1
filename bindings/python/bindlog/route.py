"""Inbound routing with reset policies (SPEC section 2b), the Python side.

:meth:`bindlog.Store.route` asks, for each inbound message, which session
its key routes to *now*: the library reads the key's last activity, decides
by a :class:`ResetPolicy` and records this message's activity, all in one
write transaction.  This module holds what the binding needs around that
call and nothing that touches the store:

* :class:`ResetMode` (the policy's mode, and a RESET's reason),
  :class:`RouteOutcome`, :class:`ResetPolicy` and :class:`RouteResult`;
* :func:`daily_boundary_ms`: the latest daily reset boundary at or before
  a time, in a time zone (``zoneinfo``, so correct across DST changes);
* the conversion of ``route()``'s keywords into the C ``bindlog_policy``.

A policy with ``at_hour`` computes its boundary from the call's ``now`` at
each call, so one ResetPolicy serves a long-running gateway; a policy with
a fixed ``daily_boundary_ms`` is for callers that compute it themselves.
"""
from __future__ import annotations

import datetime as _dt
import enum
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from . import _ffi
from .errors import InvalidArgument

__all__ = [
    "ResetMode",
    "RouteOutcome",
    "ResetPolicy",
    "RouteResult",
    "ModeName",
    "Duration",
    "TimeZone",
    "Now",
    "daily_boundary_ms",
]

#: A policy mode by name, as the gateways' configurations spell it.
ModeName = Literal["none", "idle", "daily", "both", "daily_and_idle"]
#: An idle timeout: seconds (int or float) or a :class:`datetime.timedelta`.
Duration = Union[int, float, _dt.timedelta]
#: A time zone: an IANA name (``"Europe/Berlin"``), a :class:`datetime.tzinfo`,
#: or None for the system's local zone.
TimeZone = Union[str, _dt.tzinfo, None]
#: A point in time: milliseconds since the Unix epoch, or an aware
#: :class:`datetime.datetime`.
Now = Union[int, _dt.datetime]

MS_PER_DAY = 86_400_000


class ResetMode(enum.IntEnum):
    """A reset policy's mode (``BINDLOG_RESET_*``); a RESET's reason is
    IDLE or DAILY, any other outcome's is NONE."""

    NONE = _ffi.RESET_NONE  #: never reset automatically
    IDLE = _ffi.RESET_IDLE  #: reset when ``now - last_activity > idle``
    DAILY = _ffi.RESET_DAILY  #: reset when the last activity is before the daily boundary
    BOTH = _ffi.RESET_BOTH  #: reset when either says so (whichever expires first)
    DAILY_AND_IDLE = _ffi.RESET_DAILY_AND_IDLE  #: reset only when both say so

    @classmethod
    def of(cls, value: Any, what: str = "mode") -> "ResetMode":
        """A mode from a ResetMode or its name (``"idle"``, ``"daily_and_idle"``...)."""
        if isinstance(value, ResetMode):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper().replace("-", "_")]
            except KeyError:
                names = ", ".join(repr(m.name.lower()) for m in cls)
                raise InvalidArgument(_ffi.EINVAL, f"{what} {value!r} is not one of {names}") from None
        raise TypeError(f"{what} must be a str or bindlog.ResetMode, not {type(value).__name__}")

    @property
    def uses_idle(self) -> bool:
        return self in (ResetMode.IDLE, ResetMode.BOTH, ResetMode.DAILY_AND_IDLE)

    @property
    def uses_daily(self) -> bool:
        return self in (ResetMode.DAILY, ResetMode.BOTH, ResetMode.DAILY_AND_IDLE)


class RouteOutcome(enum.IntEnum):
    """What :meth:`bindlog.Store.route` did (``BINDLOG_ROUTED`` ...)."""

    ROUTED = _ffi.ROUTED  #: fresh: the same session; this message's activity recorded
    CREATED = _ffi.CREATED  #: the key was unbound: the fresh session is bound (NEW_SESSION)
    RESET = _ffi.RESET  #: stale by the policy: the fresh session is bound, the previous one ended


def _hour(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"at_hour must be an int from 0 to 23, not {type(value).__name__}")
    if not 0 <= value <= 23:
        raise InvalidArgument(_ffi.EINVAL, f"at_hour {value} is not an hour from 0 to 23")
    return value


def _zone(tz: Any) -> Optional[_dt.tzinfo]:
    """A tzinfo, or None for the system's local zone."""
    if tz is None or isinstance(tz, _dt.tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a time zone name, a tzinfo or None, not {type(tz).__name__}")
    if sys.version_info >= (3, 9):
        import zoneinfo

        try:
            return zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidArgument(_ffi.EINVAL, f"tz {tz!r} is not a known time zone ({exc})") from None
    raise InvalidArgument(  # pragma: no cover - Python 3.8
        _ffi.EINVAL, f"tz {tz!r}: time zone names need zoneinfo (Python 3.9+); pass a tzinfo instead"
    )


def now_ms(now: Any, what: str = "now") -> int:
    """`now` as milliseconds since the epoch (None: the system clock)."""
    if now is None:
        return time.time_ns() // 1_000_000
    if isinstance(now, _dt.datetime):
        if now.tzinfo is None or now.utcoffset() is None:
            raise InvalidArgument(
                _ffi.EINVAL, f"{what} is a naive datetime: give it a time zone (datetime.now(timezone.utc))"
            )
        delta = now - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return delta // _dt.timedelta(milliseconds=1)
    if isinstance(now, bool) or not isinstance(now, int):
        raise TypeError(f"{what} must be milliseconds (int), an aware datetime or None, not {type(now).__name__}")
    if not 0 <= now <= _ffi.INT64_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} {now} is not a time in milliseconds since the epoch")
    return now


def idle_ms(value: Any) -> int:
    """An idle timeout as whole milliseconds > 0."""
    if isinstance(value, _dt.timedelta):
        ms = value // _dt.timedelta(milliseconds=1)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"idle must be seconds (int or float) or a timedelta, not {type(value).__name__}")
    elif value != value or value in (float("inf"), float("-inf")):
        raise InvalidArgument(_ffi.EINVAL, f"idle {value!r} is not a number of seconds")
    else:
        ms = int(round(value * 1000))
    if ms <= 0:
        raise InvalidArgument(_ffi.EINVAL, f"idle {value!r} is not a positive duration")
    if ms > _ffi.INT64_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"idle {value!r} is too long")
    return ms


def _at_hour(day: _dt.date, hour: int, zone: Optional[_dt.tzinfo]) -> int:
    """The first instant of `day` whose wall clock in `zone` reads `hour`:00
    or later, in ms.  In a spring-forward gap that is the end of the gap
    (02:00 that never happens is 03:00); a fall-back hour that happens twice
    is its first occurrence (fold=0, PEP 495)."""
    wall = _dt.datetime(day.year, day.month, day.day, hour)
    if zone is None:
        at = wall.astimezone()  # the system's local zone, by mktime
    else:
        at = wall.replace(tzinfo=zone, fold=0)
    return round(at.timestamp()) * 1000  # a whole hour: whole seconds


def daily_boundary_ms(hour: int, tz: TimeZone = None, now: Optional[Now] = None) -> int:
    """The latest daily reset boundary at or before `now`: the instant the
    wall clock in `tz` last read `hour`:00, in ms since the epoch -- the
    ``daily_boundary_ms`` of a DAILY policy.

    Args:
        hour: the reset hour, 0..23 (OpenClaw's ``atHour``, hermes'
            ``at_hour``).
        tz: an IANA zone name (``"Europe/Berlin"``), a tzinfo, or None for
            the system's local zone (both gateways default to the host's).
        now: ms since the epoch or an aware datetime (None: the system clock).

    On a day when DST moves the clock, the boundary is the first instant
    whose wall time is `hour`:00 or later: 02:00 on a spring-forward day in
    Berlin is 03:00 CEST (01:00 UTC); on the fall-back day it is the first
    02:00 (CEST).  Days are the zone's calendar days, so a 23- or 25-hour
    day still has exactly one boundary.

    Raises:
        TypeError: a wrong type.
        InvalidArgument: an hour outside 0..23, an unknown zone, a naive
            datetime.
    """
    try:
        h = _hour(hour)
        zone = _zone(tz)
        t = now_ms(now)
    except InvalidArgument as exc:
        raise exc._in_call("daily_boundary_ms") from None
    local = _dt.datetime.fromtimestamp(t / 1000, zone) if zone is not None else _dt.datetime.fromtimestamp(t / 1000)
    day = local.date()
    b = _at_hour(day, h, zone)
    if b > t:
        b = _at_hour(day - _dt.timedelta(days=1), h, zone)
    return b


@dataclass(frozen=True)
class ResetPolicy:
    """A gateway's session reset policy, for :meth:`bindlog.Store.route`.

    Attributes:
        mode: ``"none"`` (never reset), ``"idle"``, ``"daily"``, ``"both"``
            (whichever expires first) or ``"daily_and_idle"`` (only when
            both do), or a :class:`ResetMode`; kept as a ResetMode.
        idle: the idle timeout (seconds or a timedelta); needed by the
            modes with "idle" in them.
        at_hour: the daily reset hour (0..23) in `tz`; the boundary is then
            computed from each call's `now` (:func:`daily_boundary_ms`).
        tz: the zone of `at_hour`: an IANA name, a tzinfo, or None for the
            system's local zone.
        daily_boundary_ms: a fixed boundary (ms) instead of `at_hour`.

    A daily mode needs `at_hour` or `daily_boundary_ms` (not both).  The
    values are checked when the policy is made.
    """

    mode: Union[ModeName, ResetMode] = "none"
    idle: Optional[Duration] = None
    at_hour: Optional[int] = None
    tz: TimeZone = None
    daily_boundary_ms: Optional[int] = None

    def __post_init__(self) -> None:
        # the mode is kept as a ResetMode, so equal policies compare equal
        object.__setattr__(self, "mode", self._check())

    def _check(self) -> ResetMode:
        m = ResetMode.of(self.mode)
        if m.uses_idle:
            if self.idle is None:
                raise InvalidArgument(_ffi.EINVAL, f"mode {m.name.lower()!r} needs idle (seconds or a timedelta)")
            idle_ms(self.idle)
        elif self.idle is not None:
            idle_ms(self.idle)  # still a valid duration
        if m.uses_daily:
            if self.at_hour is None and self.daily_boundary_ms is None:
                raise InvalidArgument(_ffi.EINVAL, f"mode {m.name.lower()!r} needs at_hour or daily_boundary_ms")
        if self.at_hour is not None and self.daily_boundary_ms is not None:
            raise InvalidArgument(_ffi.EINVAL, "give at_hour or daily_boundary_ms, not both")
        if self.at_hour is not None:
            _hour(self.at_hour)
            _zone(self.tz)
        elif self.tz is not None:
            _zone(self.tz)
        if self.daily_boundary_ms is not None:
            now_ms(self.daily_boundary_ms, "daily_boundary_ms")
        return m

    @property
    def reset_mode(self) -> ResetMode:
        """:attr:`mode` as a :class:`ResetMode`."""
        return ResetMode.of(self.mode)

    def boundary_ms(self, now: int) -> int:
        """The daily boundary this policy uses at `now` (ms); 0 when it has none."""
        if self.daily_boundary_ms is not None:
            return self.daily_boundary_ms
        if self.at_hour is not None:
            return daily_boundary_ms(self.at_hour, self.tz, now)
        return 0

    def _c(self, now: int) -> "_ffi.bindlog_policy":
        """The C policy at `now`."""
        m = self.reset_mode
        p = _ffi.bindlog_policy()
        p.mode = int(m)
        p.idle_ms = idle_ms(self.idle) if self.idle is not None else 0
        p.daily_boundary_ms = self.boundary_ms(now) if m.uses_daily else 0
        return p

    # ---- the gateways' own settings ----

    @classmethod
    def from_openclaw(cls, reset: Optional[Any] = None, *, tz: TimeZone = None) -> "ResetPolicy":
        """OpenClaw's ``session.reset`` block (the already merged one: pick
        ``resetByChannel[channel]``, else ``resetByType[type]``, else
        ``reset`` before calling): ``{"mode": "daily" | "idle", "atHour":
        4, "idleMinutes": 60}``.  ``mode: "daily"`` with ``idleMinutes`` is
        BOTH (whichever expires first); without a block, OpenClaw resets
        daily at 04:00 local time."""
        r = {} if reset is None else reset
        if not isinstance(r, dict):
            raise TypeError(f"reset must be a dict (OpenClaw's session.reset), not {type(r).__name__}")
        mode = r.get("mode", "daily")
        idle_min = r.get("idleMinutes")
        idle = None if idle_min is None else _minutes(idle_min, "idleMinutes")
        if mode == "idle":
            if idle is None:
                raise InvalidArgument(_ffi.EINVAL, "OpenClaw reset mode 'idle' needs idleMinutes")
            return cls("idle", idle=idle)
        if mode == "daily":
            hour = r.get("atHour", 4)
            return cls("both" if idle is not None else "daily", idle=idle, at_hour=hour, tz=tz)
        raise InvalidArgument(_ffi.EINVAL, f"OpenClaw reset mode {mode!r} is not 'daily' or 'idle'")

    @classmethod
    def from_hermes(cls, session_reset: Optional[Any] = None, *, tz: TimeZone = None) -> "ResetPolicy":
        """hermes-agent's ``session_reset`` block: ``{"mode": "both" |
        "idle" | "daily" | "none", "at_hour": 4, "idle_minutes": 1440}``
        (hermes' defaults: mode "both", at_hour 4, idle_minutes 1440)."""
        r = {} if session_reset is None else session_reset
        if not isinstance(r, dict):
            raise TypeError(f"session_reset must be a dict, not {type(r).__name__}")
        mode = r.get("mode", "both")
        if mode not in ("both", "idle", "daily", "none"):
            raise InvalidArgument(_ffi.EINVAL, f"hermes session_reset mode {mode!r} is not both, idle, daily or none")
        if mode == "none":
            return cls("none")
        m = ResetMode.of(mode)
        idle = _minutes(r.get("idle_minutes", 1440), "idle_minutes") if m.uses_idle else None
        hour = r.get("at_hour", 4) if m.uses_daily else None
        return cls(m, idle=idle, at_hour=hour, tz=tz if hour is not None else None)


def _minutes(value: Any, what: str) -> _dt.timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of minutes, not {type(value).__name__}")
    if not value > 0:
        raise InvalidArgument(_ffi.EINVAL, f"{what} {value!r} is not a positive number of minutes")
    return _dt.timedelta(minutes=value)


def policy_of(policy: Optional[ResetPolicy], mode: Optional[Any], idle: Optional[Any],
              at_hour: Optional[Any], tz: Any, boundary: Optional[Any]) -> ResetPolicy:
    """route()'s policy: `policy`, or one made of the keywords (not both)."""
    given = [n for n, v in (("mode", mode), ("idle", idle), ("at_hour", at_hour), ("tz", tz),
                            ("daily_boundary_ms", boundary)) if v is not None]
    if policy is not None:
        if not isinstance(policy, ResetPolicy):
            raise TypeError(f"policy must be a bindlog.ResetPolicy, not {type(policy).__name__}")
        if given:
            raise TypeError(f"give policy= or the policy keywords, not both (also given: {', '.join(given)})")
        return policy
    return ResetPolicy("none" if mode is None else mode, idle, at_hour, tz, boundary)


def fresh_id(value: Any) -> str:
    """route()'s fresh session id: the one given, or a new uuid4."""
    if value is None:
        return str(uuid.uuid4())
    return value  # type: ignore[no-any-return]


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class RouteResult:
    """Where a message goes (see :meth:`bindlog.Store.route`).

    Attributes:
        outcome: ROUTED, CREATED or RESET.
        reason: a RESET's reason, :attr:`ResetMode.IDLE` or
            :attr:`ResetMode.DAILY`; :attr:`ResetMode.NONE` otherwise.
        session_id: the session this message goes to.
        previous_id: a RESET's ended session (``""`` otherwise).
        generation: the key's generation after the call (a RESET bumps it,
            so runs started before it get STALE).
        lsn: the record this call wrote; 0 for a ROUTED message at the
            time the key's activity already stands at (several messages of
            one key in one millisecond: nothing changes, nothing is logged).
        last_activity_ms: the key's last activity *before* this message
            (what the decision read); 0 if it had none.
    """

    outcome: RouteOutcome
    reason: ResetMode
    session_id: str
    previous_id: str
    generation: int
    lsn: int
    last_activity_ms: int

    @property
    def reset(self) -> bool:
        """True when this message started a new session by the policy."""
        return self.outcome is RouteOutcome.RESET

    @property
    def created(self) -> bool:
        """True when the key was unbound and the fresh session was bound."""
        return self.outcome is RouteOutcome.CREATED

    @property
    def fresh(self) -> bool:
        """True when the message goes to a session this call bound (CREATED
        or RESET): the gateway starts its context afresh."""
        return self.outcome is not RouteOutcome.ROUTED

    @classmethod
    def _from_c(cls, outcome: int, r: "_ffi.bindlog_route_result") -> "RouteResult":
        try:
            reason = ResetMode(r.reason)
        except ValueError:
            reason = ResetMode.NONE
        return cls(RouteOutcome(outcome), reason, _s(r.session_id), _s(r.previous_id),
                   r.generation, r.lsn, r.last_activity_ms)
