"""Inbound routing (SPEC section 2b) through Python: Store.route(),
AsyncStore.route(), expire(), the reset policy and daily_boundary_ms().

The scenarios are the bug classes of the gateways' trackers that route()
exists to end: activity recorded before freshness is judged, the message
that triggers a reset lost, a restart re-arming the idle clock, concurrent
messages at a boundary resetting twice, a run started before a reset
writing into the new session, daily-and-idle, a clock going back, and
``mode none`` resetting anyway."""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import tempfile
import threading
import unittest
from typing import List

from support import tmp_root

import bindlog
from bindlog import (
    EventType,
    Exists,
    InvalidArgument,
    Outcome,
    ReadOnly,
    ResetMode,
    ResetPolicy,
    RouteOutcome,
    RouteResult,
    daily_boundary_ms,
)

UTC = dt.timezone.utc


def ms(iso: str) -> int:
    """An ISO-8601 time with an offset, as ms since the epoch."""
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


class DailyBoundary(unittest.TestCase):
    """daily_boundary_ms(): the latest boundary at or before now, in the zone's
    own calendar, across DST changes (values worked out by hand from the
    zones' rules: Berlin moves at 01:00 UTC, New York at 02:00 local)."""

    def check(self, hour: int, tz: str, now: str, expect: str) -> None:
        with self.subTest(hour=hour, tz=tz, now=now):
            self.assertEqual(daily_boundary_ms(hour, tz, ms(now)), ms(expect))

    def test_route__boundary_on_an_ordinary_day(self) -> None:
        self.check(4, "Europe/Berlin", "2026-01-15T12:00:00+00:00", "2026-01-15T03:00:00+00:00")
        self.check(4, "Europe/Berlin", "2026-07-15T12:00:00+00:00", "2026-07-15T02:00:00+00:00")
        # before today's boundary: yesterday's
        self.check(4, "Europe/Berlin", "2026-01-15T02:59:59+00:00", "2026-01-14T03:00:00+00:00")
        # exactly at the boundary: that boundary
        self.check(4, "Europe/Berlin", "2026-01-15T03:00:00+00:00", "2026-01-15T03:00:00+00:00")
        self.check(0, "UTC", "2026-01-15T00:00:00+00:00", "2026-01-15T00:00:00+00:00")
        self.check(23, "UTC", "2026-01-15T22:59:59+00:00", "2026-01-14T23:00:00+00:00")

    def test_route__boundary_across_spring_forward(self) -> None:
        # Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC)
        self.check(4, "Europe/Berlin", "2026-03-28T12:00:00+00:00", "2026-03-28T03:00:00+00:00")
        self.check(4, "Europe/Berlin", "2026-03-29T12:00:00+00:00", "2026-03-29T02:00:00+00:00")
        # 02:00 never happens that day: the boundary is the end of the gap
        self.check(2, "Europe/Berlin", "2026-03-29T12:00:00+00:00", "2026-03-29T01:00:00+00:00")
        self.check(2, "Europe/Berlin", "2026-03-29T00:59:59+00:00", "2026-03-28T01:00:00+00:00")
        # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC)
        self.check(2, "America/New_York", "2026-03-08T12:00:00+00:00", "2026-03-08T07:00:00+00:00")
        self.check(4, "America/New_York", "2026-03-08T12:00:00+00:00", "2026-03-08T08:00:00+00:00")
        self.check(4, "America/New_York", "2026-03-08T07:59:59+00:00", "2026-03-07T09:00:00+00:00")

    def test_route__boundary_across_fall_back(self) -> None:
        # Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC)
        self.check(2, "Europe/Berlin", "2026-10-25T12:00:00+00:00", "2026-10-25T00:00:00+00:00")
        self.check(4, "Europe/Berlin", "2026-10-25T12:00:00+00:00", "2026-10-25T03:00:00+00:00")
        self.check(4, "Europe/Berlin", "2026-10-25T02:59:00+00:00", "2026-10-24T02:00:00+00:00")
        # New York, 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:00 happens
        # twice and the boundary is the first (EDT)
        self.check(1, "America/New_York", "2026-11-01T12:00:00+00:00", "2026-11-01T05:00:00+00:00")
        self.check(4, "America/New_York", "2026-11-01T12:00:00+00:00", "2026-11-01T09:00:00+00:00")

    def test_route__boundary_takes_datetimes_and_tzinfo(self) -> None:
        now = dt.datetime(2026, 1, 15, 12, tzinfo=UTC)
        self.assertEqual(daily_boundary_ms(4, UTC, now), ms("2026-01-15T04:00:00+00:00"))
        fixed = dt.timezone(dt.timedelta(hours=5, minutes=30))
        self.assertEqual(daily_boundary_ms(4, fixed, now), ms("2026-01-15T04:00:00+05:30"))
        # the system's zone: some boundary within the last day
        b = daily_boundary_ms(4)
        t = int(dt.datetime.now(UTC).timestamp() * 1000)
        self.assertLessEqual(b, t)
        self.assertGreater(b, t - 25 * 3600 * 1000)

    def test_route__boundary_bad_arguments(self) -> None:
        with self.assertRaisesRegex(InvalidArgument, "at_hour 24 is not an hour from 0 to 23"):
            daily_boundary_ms(24, "UTC", 0)
        with self.assertRaisesRegex(TypeError, "at_hour must be an int"):
            daily_boundary_ms(4.0, "UTC", 0)  # type: ignore[arg-type]
        with self.assertRaisesRegex(InvalidArgument, "'Mars/Olympus' is not a known time zone"):
            daily_boundary_ms(4, "Mars/Olympus", 0)
        with self.assertRaisesRegex(InvalidArgument, "naive datetime"):
            daily_boundary_ms(4, "UTC", dt.datetime(2026, 1, 1))
        with self.assertRaisesRegex(TypeError, "tz must be a time zone name"):
            daily_boundary_ms(4, 5, 0)  # type: ignore[arg-type]
        with self.assertRaisesRegex(InvalidArgument, "now -1 is not a time"):
            daily_boundary_ms(4, "UTC", -1)
        try:
            daily_boundary_ms(4, "Nowhere/Land", 0)
        except InvalidArgument as exc:
            self.assertTrue(exc.message.startswith("daily_boundary_ms: "), exc.message)
            self.assertEqual(exc.name, "BINDLOG_EINVAL")


class Policy(unittest.TestCase):
    def test_route__policy_checks_its_values(self) -> None:
        with self.assertRaisesRegex(InvalidArgument, "mode 'idle' needs idle"):
            ResetPolicy("idle")
        with self.assertRaisesRegex(InvalidArgument, "mode 'daily' needs at_hour or daily_boundary_ms"):
            ResetPolicy("daily")
        with self.assertRaisesRegex(InvalidArgument, "mode 'weekly' is not one of 'none', 'idle'"):
            ResetPolicy("weekly")  # type: ignore[arg-type]
        with self.assertRaisesRegex(InvalidArgument, "idle 0 is not a positive duration"):
            ResetPolicy("idle", idle=0)
        with self.assertRaisesRegex(InvalidArgument, "not a positive duration"):
            ResetPolicy("idle", idle=dt.timedelta(seconds=-1))
        with self.assertRaisesRegex(InvalidArgument, "idle nan is not a number of seconds"):
            ResetPolicy("idle", idle=float("nan"))
        with self.assertRaisesRegex(TypeError, "idle must be seconds"):
            ResetPolicy("idle", idle="1h")  # type: ignore[arg-type]
        with self.assertRaisesRegex(InvalidArgument, "not both"):
            ResetPolicy("daily", at_hour=4, daily_boundary_ms=1)
        with self.assertRaisesRegex(TypeError, "mode must be a str"):
            ResetPolicy(2.5)  # type: ignore[arg-type]

    def test_route__policy_as_the_c_struct(self) -> None:
        now = ms("2026-01-15T12:00:00+00:00")
        p = ResetPolicy("daily_and_idle", idle=dt.timedelta(minutes=90), at_hour=4, tz="UTC")._c(now)
        self.assertEqual((p.mode, p.idle_ms, p.daily_boundary_ms),
                         (int(ResetMode.DAILY_AND_IDLE), 90 * 60_000, ms("2026-01-15T04:00:00+00:00")))
        p = ResetPolicy(ResetMode.IDLE, idle=1.5)._c(now)
        self.assertEqual((p.mode, p.idle_ms, p.daily_boundary_ms), (1, 1500, 0))
        p = ResetPolicy("daily", daily_boundary_ms=1234)._c(now)
        self.assertEqual((p.mode, p.daily_boundary_ms), (2, 1234))
        self.assertEqual(ResetPolicy()._c(now).mode, 0)

    def test_route__openclaw_settings(self) -> None:
        f = ResetPolicy.from_openclaw
        self.assertEqual(f(None, tz="UTC"), ResetPolicy("daily", at_hour=4, tz="UTC"))
        self.assertEqual(f({"mode": "daily", "atHour": 6}), ResetPolicy("daily", at_hour=6))
        # daily with idleMinutes: whichever expires first
        self.assertEqual(f({"mode": "daily", "atHour": 4, "idleMinutes": 120}),
                         ResetPolicy("both", idle=dt.timedelta(minutes=120), at_hour=4))
        self.assertEqual(f({"mode": "idle", "idleMinutes": 30}),
                         ResetPolicy("idle", idle=dt.timedelta(minutes=30)))
        with self.assertRaisesRegex(InvalidArgument, "'idle' needs idleMinutes"):
            f({"mode": "idle"})
        with self.assertRaisesRegex(InvalidArgument, "'never' is not 'daily' or 'idle'"):
            f({"mode": "never"})

    def test_route__hermes_settings(self) -> None:
        f = ResetPolicy.from_hermes
        day = dt.timedelta(minutes=1440)
        self.assertEqual(f(None), ResetPolicy("both", idle=day, at_hour=4))
        self.assertEqual(f({"mode": "none", "at_hour": 3}), ResetPolicy("none"))
        self.assertEqual(f({"mode": "idle", "idle_minutes": 240}),
                         ResetPolicy("idle", idle=dt.timedelta(minutes=240)))
        self.assertEqual(f({"mode": "daily", "at_hour": 5}, tz="Europe/Berlin"),
                         ResetPolicy("daily", at_hour=5, tz="Europe/Berlin"))
        with self.assertRaisesRegex(InvalidArgument, "idle_minutes 0 is not a positive"):
            f({"mode": "both", "idle_minutes": 0})
        with self.assertRaisesRegex(InvalidArgument, "'sometimes' is not both, idle, daily or none"):
            f({"mode": "sometimes"})


MIN = 60_000
HOUR = 60 * MIN
T0 = ms("2026-01-15T10:00:00+00:00")
KEY = "agent:main:telegram:dm:42"


class Clock:
    """The store's clock: every event (route with now=None, bind, split...)
    is logged at `t`."""

    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


class RouteCase(unittest.TestCase):
    """A fresh store per test whose clock the test moves."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bindlog-py-route-", dir=tmp_root())
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "store")
        self.clock = Clock(T0)
        self.store = self.open()

    def open(self, **kw: object) -> bindlog.Store:
        s = bindlog.Store(self.path, durability="none", clock=self.clock, **kw)  # type: ignore[arg-type]
        self.addCleanup(s.close)
        return s

    def at(self, t: int) -> None:
        self.clock.t = t

    def route(self, key: str = KEY, **kw: object) -> RouteResult:
        return self.store.route(key, **kw)  # type: ignore[arg-type]


class RouteScenarios(RouteCase):
    def test_route__created_then_routed_then_reset(self) -> None:
        r = self.route(mode="idle", idle=dt.timedelta(minutes=30), fresh_session_id="s-1", origin={"chat": 42})
        self.assertEqual((r.outcome, r.reason, r.session_id, r.previous_id, r.generation, r.last_activity_ms),
                         (RouteOutcome.CREATED, ResetMode.NONE, "s-1", "", 1, 0))
        self.assertTrue(r.created and r.fresh and not r.reset)
        self.assertEqual(self.store.session("s-1").origin_json(), {"chat": 42})
        self.at(T0 + 10 * MIN)
        r = self.route(mode="idle", idle=30 * 60, fresh_session_id="s-unused")
        self.assertEqual((r.outcome, r.session_id, r.generation, r.last_activity_ms),
                         (RouteOutcome.ROUTED, "s-1", 1, T0))
        self.assertIsNone(self.store.session("s-unused"))  # only used by CREATED and RESET
        b = self.store.get(KEY)
        self.assertEqual((b.session_id, b.last_activity_ms, b.updated_ms), ("s-1", T0 + 10 * MIN, T0))

    def test_route__activity_is_read_before_it_is_recorded(self) -> None:
        """OpenClaw #11520/#51991: updatedAt bumped on the inbound path before
        freshness was judged, so idle reset never fired.  Here the decision
        reads the activity before this message's."""
        self.route(fresh_session_id="s-1")
        self.at(T0 + 31 * MIN)
        r = self.route(mode="idle", idle=dt.timedelta(minutes=30), fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.reason, r.last_activity_ms), (RouteOutcome.RESET, ResetMode.IDLE, T0))
        # idle is "more than": exactly idle old is still fresh
        self.at(T0 + 61 * MIN)
        r = self.route(mode="idle", idle=dt.timedelta(minutes=30), fresh_session_id="s-3")
        self.assertEqual(r.outcome, RouteOutcome.ROUTED)
        self.at(T0 + 91 * MIN + 1)
        r = self.route(mode="idle", idle=dt.timedelta(minutes=30), fresh_session_id="s-3")
        self.assertEqual((r.outcome, r.previous_id, r.session_id), (RouteOutcome.RESET, "s-2", "s-3"))

    def test_route__the_triggering_message_goes_to_the_new_session(self) -> None:
        """OpenClaw #129688/#78059: the idle-triggered reset consumed the
        message.  A RESET routes it to the new session, in one record."""
        self.route(fresh_session_id="old")
        gen = self.store.get(KEY).generation
        self.at(T0 + 2 * HOUR)
        head = self.store.stats().head_lsn
        r = self.route(mode="idle", idle=HOUR // 1000, fresh_session_id="new", origin=b"msg-7")
        self.assertEqual((r.outcome, r.session_id, r.previous_id), (RouteOutcome.RESET, "new", "old"))
        self.assertEqual(r.generation, gen + 1)
        self.assertEqual(r.lsn, head + 1)
        self.assertEqual(self.store.stats().head_lsn, head + 1)  # one record: the NEW_SESSION
        b = self.store.get(KEY)
        self.assertEqual((b.session_id, b.generation, b.last_activity_ms), ("new", gen + 1, T0 + 2 * HOUR))
        new, old = self.store.session("new"), self.store.session("old")
        self.assertEqual((new.parent_id, new.live, new.origin), ("old", True, b"msg-7"))
        self.assertEqual((old.live, old.end_reason), (False, "idle"))
        rec = list(self.store.log(r.lsn))[0]
        self.assertEqual((rec.type, rec.reason, rec.reset_reason, rec.other_id, rec.session_id),
                         (EventType.NEW_SESSION, "idle", ResetMode.IDLE, "old", "new"))

    def test_route__reopen_keeps_the_true_last_activity(self) -> None:
        """hermes-agent #66255: a session recovered after a restart was
        stamped updated_at = now and never evaluated.  Open and recovery
        never move the last activity."""
        self.route(fresh_session_id="s-1")
        self.at(T0 + 5 * MIN)
        self.route(fresh_session_id="x")
        digest = self.store.digest()
        self.store.close()
        self.at(T0 + 3 * HOUR)
        self.store = self.open()
        b = self.store.get(KEY)
        self.assertEqual((b.last_activity_ms, b.updated_ms), (T0 + 5 * MIN, T0))
        self.assertEqual(self.store.digest(), digest)  # open wrote nothing
        ro = bindlog.Store(self.path, read_only=True)
        self.addCleanup(ro.close)
        self.assertEqual(ro.get(KEY).last_activity_ms, T0 + 5 * MIN)
        r = self.route(mode="idle", idle=dt.timedelta(hours=1), fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.last_activity_ms), (RouteOutcome.RESET, T0 + 5 * MIN))

    def test_route__import_takes_the_gateways_update_time_as_activity(self) -> None:
        """hermes-agent PR #78618: a session recovered from the gateway's own
        table must keep its true last activity, not become fresh at import."""
        out = self.store.import_entries([bindlog.ImportEntry(KEY, "s-1", T0 - 3 * HOUR, {"updated_at": 1})])
        self.assertTrue(out[0].imported)
        self.assertEqual(self.store.get(KEY).last_activity_ms, T0 - 3 * HOUR)
        r = self.route(mode="idle", idle=dt.timedelta(hours=1), fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.previous_id, r.last_activity_ms), (RouteOutcome.RESET, "s-1", T0 - 3 * HOUR))

    def test_route__snapshots_see_bindings_as_of_their_lsn(self) -> None:
        self.route(fresh_session_id="s-1")
        self.at(T0 + MIN)
        self.route(fresh_session_id="x")
        with self.store.snapshot() as snap:
            self.at(T0 + 2 * MIN)
            self.route(fresh_session_id="y")  # ROUTED: the binding is unchanged
            b = snap.get(KEY)
            self.assertEqual((b.session_id, b.generation, b.lsn, b.last_activity_ms), ("s-1", 1, 1, T0 + 2 * MIN))
            self.at(T0 + 2 * HOUR)
            self.route(mode="idle", idle=60, fresh_session_id="s-2")
            b = snap.get(KEY)  # rebuilt from the key's history, which has no ROUTE records
            self.assertEqual((b.session_id, b.generation, b.lsn, b.updated_ms, b.last_activity_ms),
                             ("s-1", 1, 1, T0, 0))
            self.assertTrue(snap.session("s-1").live)
        self.assertEqual(self.store.get(KEY).session_id, "s-2")

    def test_route__a_bind_counts_as_activity(self) -> None:
        self.store.bind(KEY, "s-1")
        self.at(T0 + 20 * MIN)
        r = self.route(mode="idle", idle=dt.timedelta(minutes=30), fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.session_id), (RouteOutcome.ROUTED, "s-1"))

    def _race(self, n: int) -> None:
        self.route(fresh_session_id="old")
        self.at(T0 + 2 * HOUR)
        barrier = threading.Barrier(n)
        results: List[RouteResult] = []
        errors: List[BaseException] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            try:
                barrier.wait()
                r = self.store.route(KEY, mode="idle", idle=HOUR // 1000, fresh_session_id=f"new-{i}")
                with lock:
                    results.append(r)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        resets = [r for r in results if r.outcome is RouteOutcome.RESET]
        self.assertEqual(len(resets), 1, [r.outcome for r in results])
        winner = resets[0].session_id
        self.assertEqual({r.session_id for r in results}, {winner})
        self.assertEqual({r.generation for r in results}, {resets[0].generation})
        self.assertEqual(self.store.get(KEY).session_id, winner)
        self.assertEqual(sum(1 for s in self.store.sessions() if s.live), 1)

    def test_route__two_concurrent_routes_at_a_boundary_give_one_reset(self) -> None:
        self._race(2)

    def test_route__sixteen_concurrent_routes_at_a_boundary_give_one_reset(self) -> None:
        self._race(16)

    def test_route__a_run_started_before_a_reset_is_stale(self) -> None:
        self.route(fresh_session_id="A")
        run = self.store.get(KEY)
        self.at(T0 + 25 * HOUR)
        r = self.route(mode="daily", at_hour=4, tz="UTC", fresh_session_id="B")
        self.assertEqual((r.outcome, r.reason), (RouteOutcome.RESET, ResetMode.DAILY))
        head, digest = self.store.stats().head_lsn, self.store.digest()
        s = self.store.split(KEY, run.session_id, "A-child", run_generation=run.generation)
        self.assertEqual(s.outcome, Outcome.STALE)
        self.assertEqual((self.store.stats().head_lsn, self.store.digest()), (head, digest))
        self.assertIsNone(self.store.session("A-child"))
        # a ROUTED message leaves the generation alone: a run stays current
        gen = self.store.get(KEY).generation
        self.at(T0 + 25 * HOUR + MIN)
        self.assertEqual(self.route(fresh_session_id="z").generation, gen)
        self.assertEqual(self.store.split(KEY, "B", "B-child", run_generation=gen).outcome, Outcome.APPLIED)

    def test_route__daily_boundary(self) -> None:
        """OpenClaw #63820/#109602 (daily reset never fired) and #49170 (a
        session in use at the boundary): stale only when the activity is
        before the boundary."""
        pol = ResetPolicy("daily", at_hour=4, tz="UTC")
        self.at(ms("2026-01-15T03:59:00+00:00"))
        self.route(policy=pol, fresh_session_id="s-1")
        self.at(ms("2026-01-15T04:00:30+00:00"))
        r = self.route(policy=pol, fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.reason, r.previous_id), (RouteOutcome.RESET, ResetMode.DAILY, "s-1"))
        self.at(ms("2026-01-16T03:59:59+00:00"))
        self.assertEqual(self.route(policy=pol, fresh_session_id="s-3").outcome, RouteOutcome.ROUTED)
        # an explicit boundary works the same
        self.at(ms("2026-01-16T04:00:00+00:00"))
        r = self.route(mode="daily", daily_boundary_ms=ms("2026-01-16T04:00:00+00:00"), fresh_session_id="s-3")
        self.assertEqual(r.outcome, RouteOutcome.RESET)

    def test_route__daily_and_idle_needs_both(self) -> None:
        """hermes-agent PR #92218: reset only when the session is both past
        the daily boundary and idle."""
        pol = ResetPolicy("daily_and_idle", idle=dt.timedelta(hours=1), at_hour=4, tz="UTC")
        self.at(ms("2026-01-15T03:30:00+00:00"))
        self.route(policy=pol, fresh_session_id="s-1")
        self.at(ms("2026-01-15T04:10:00+00:00"))  # past the boundary, idle 40 min
        self.assertEqual(self.route(policy=pol, fresh_session_id="s-2").outcome, RouteOutcome.ROUTED)
        self.at(ms("2026-01-15T05:30:00+00:00"))  # idle 80 min, active since the boundary
        self.assertEqual(self.route(policy=pol, fresh_session_id="s-2").outcome, RouteOutcome.ROUTED)
        self.at(ms("2026-01-16T04:30:00+00:00"))  # both
        r = self.route(policy=pol, fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.session_id), (RouteOutcome.RESET, "s-2"))
        self.assertIn(r.reason, (ResetMode.DAILY, ResetMode.IDLE))
        # "both": whichever expires first
        both = ResetPolicy("both", idle=dt.timedelta(hours=1), at_hour=4, tz="UTC")
        self.at(ms("2026-01-16T05:31:00+00:00"))
        r = self.route(policy=both, fresh_session_id="s-3")
        self.assertEqual((r.outcome, r.reason), (RouteOutcome.RESET, ResetMode.IDLE))

    def test_route__a_clock_going_back_moves_nothing_backwards(self) -> None:
        self.route(fresh_session_id="s-1")
        self.at(T0 + 10 * MIN)
        self.route(fresh_session_id="x")
        self.at(T0 - HOUR)  # the clock went back an hour
        r = self.route(mode="idle", idle=dt.timedelta(minutes=5), fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.last_activity_ms), (RouteOutcome.ROUTED, T0 + 10 * MIN))
        self.assertEqual(self.store.get(KEY).last_activity_ms, T0 + 10 * MIN)
        # an explicit now in the past: the same
        r = self.route(now=T0, mode="idle", idle=dt.timedelta(minutes=5), fresh_session_id="s-2")
        self.assertEqual(r.outcome, RouteOutcome.ROUTED)
        self.assertEqual(self.store.get(KEY).last_activity_ms, T0 + 10 * MIN)
        times = [rec.time_ms for rec in self.store.log()]
        self.assertEqual(times, sorted(times))

    def test_route__mode_none_never_resets(self) -> None:
        """hermes-agent #61052: a reset path ignored mode none."""
        self.route(fresh_session_id="s-1")
        for days in (1, 30, 400):
            self.at(T0 + days * 24 * HOUR)
            r = self.route(mode="none", fresh_session_id=f"n-{days}")
            self.assertEqual((r.outcome, r.session_id), (RouteOutcome.ROUTED, "s-1"))
            r = self.route(policy=ResetPolicy(), fresh_session_id=f"p-{days}")
            self.assertEqual(r.outcome, RouteOutcome.ROUTED)
        r = self.route(policy=ResetPolicy.from_hermes({"mode": "none"}), fresh_session_id="h")
        self.assertEqual(r.outcome, RouteOutcome.ROUTED)
        self.assertEqual(self.store.get(KEY).generation, 1)

    def test_route__fresh_id_defaults_to_a_uuid(self) -> None:
        r = self.route()
        self.assertEqual(r.outcome, RouteOutcome.CREATED)
        self.assertRegex(r.session_id, r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        self.assertEqual(self.route().session_id, r.session_id)

    def test_route__an_unbound_key_is_created_again(self) -> None:
        self.route(fresh_session_id="s-1")
        self.store.unbind(KEY)
        r = self.route(mode="idle", idle=1, fresh_session_id="s-2")
        self.assertEqual((r.outcome, r.session_id, r.generation), (RouteOutcome.CREATED, "s-2", 3))

    def test_route__follow_shows_routes_resets_and_expiry(self) -> None:
        """OpenClaw #37955: automatic resets fired no event, so hooks that
        save context before a reset never ran."""
        self.route(fresh_session_id="s-1")
        self.at(T0 + MIN)
        self.route(fresh_session_id="x")
        self.at(T0 + 3 * HOUR)
        self.route(mode="idle", idle=3600, fresh_session_id="s-2")
        self.at(T0 + 30 * HOUR)
        self.assertEqual(self.store.expire(dt.timedelta(hours=1)), 1)
        recs = list(self.store.follow(1, until="head"))
        self.assertEqual([(r.type, r.reason) for r in recs],
                         [(EventType.NEW_SESSION, "new_session"), (EventType.ROUTE, recs[1].reason),
                          (EventType.NEW_SESSION, "idle"), (EventType.UNBIND, "expired")])
        self.assertEqual((recs[1].key, recs[1].time_ms, recs[1].generation), (KEY, T0 + MIN, 1))
        self.assertEqual([r.reset_reason for r in recs], [None, None, ResetMode.IDLE, None])
        self.assertEqual([r.expired for r in recs], [False, False, False, True])
        saved = [(r.other_id, r.session_id) for r in recs if r.reset_reason]
        self.assertEqual(saved, [("s-1", "s-2")])
        st = self.store.stats()
        self.assertEqual((st.applied["route"], st.applied["new_session"], st.applied["unbind"]), (1, 2, 1))

    def test_route__bad_arguments(self) -> None:
        with self.assertRaisesRegex(InvalidArgument, "^route agent:main:telegram:dm:42: mode 'idle' needs idle"):
            self.route(mode="idle")
        with self.assertRaisesRegex(TypeError, "give policy= or the policy keywords, not both"):
            self.route(policy=ResetPolicy(), mode="none")
        with self.assertRaisesRegex(TypeError, "policy must be a bindlog.ResetPolicy"):
            self.route(policy={"mode": "idle"})
        with self.assertRaisesRegex(InvalidArgument, "fresh_session_id contains a control character"):
            self.route(fresh_session_id="a\nb")
        with self.assertRaisesRegex(InvalidArgument, "key is empty"):
            self.store.route("")
        with self.assertRaisesRegex(InvalidArgument, "naive datetime"):
            self.route(now=dt.datetime(2026, 1, 1))
        with self.assertRaisesRegex(TypeError, "now must be milliseconds"):
            self.route(now="now")
        with self.assertRaisesRegex(TypeError, "origin must be bytes, str, dict or list"):
            self.route(origin=3)
        with self.assertRaisesRegex(TypeError, "unexpected keyword"):
            self.route(idle_minutes=5)
        self.assertEqual(self.store.stats().head_lsn, 0)
        self.route(fresh_session_id="s-1")
        self.route("agent:other", fresh_session_id="taken")
        self.at(T0 + 2 * HOUR)
        with self.assertRaises(Exists) as cm:
            self.route(mode="idle", idle=60, fresh_session_id="taken")
        self.assertEqual(cm.exception.name, "BINDLOG_EEXIST")
        self.assertEqual(self.store.get(KEY).session_id, "s-1")
        ro = bindlog.Store(self.path, read_only=True)
        self.addCleanup(ro.close)
        with self.assertRaises(ReadOnly):
            ro.route(KEY)
        self.assertEqual(ro.expire(1, dry_run=True), 2)
        with self.assertRaises(ReadOnly):
            ro.expire(1)


class RouteModel(RouteCase):
    def test_route__random_clocks_and_policies_agree_with_a_model(self) -> None:
        """route() through the binding against a few lines of SPEC 2b:
        random policies, boundaries and clocks (going back too) on three
        keys; every outcome, reason, generation, session and judged
        activity must be the model's."""
        import random

        rnd = random.Random(20261204)
        modes = list(ResetMode)
        log_time = 0
        model = {}  # key -> [session, generation, activity]
        seen = set()
        head = 0
        now = T0
        for step in range(400):
            key = f"k{rnd.randrange(3)}"
            now = max(1, now + rnd.randint(-HOUR, 3 * HOUR))
            mode = rnd.choice(modes)
            idle = rnd.randint(1, 3 * 3600)
            t = max(now, log_time)  # the event's time: never before the log's last
            st = model.get(key)
            boundary = max(0, (st[2] if st else t) + rnd.randint(-2 * HOUR, 2 * HOUR))
            fresh = f"s{step}"
            r = self.store.route(key, now=now, mode=mode, idle=idle, daily_boundary_ms=boundary,
                                 fresh_session_id=fresh)
            if st is None:
                want = (RouteOutcome.CREATED, ResetMode.NONE, fresh, 1, 0)
                model[key] = [fresh, 1, t]
            else:
                sid, gen, act = st
                by_idle = t - act > idle * 1000
                by_daily = act < boundary
                stale = {ResetMode.NONE: False, ResetMode.IDLE: by_idle, ResetMode.DAILY: by_daily,
                         ResetMode.BOTH: by_idle or by_daily,
                         ResetMode.DAILY_AND_IDLE: by_idle and by_daily}[mode]
                if stale:
                    reason = ResetMode.DAILY if (by_daily and mode is not ResetMode.IDLE) else ResetMode.IDLE
                    want = (RouteOutcome.RESET, reason, fresh, gen + 1, act)
                    model[key] = [fresh, gen + 1, t]
                else:
                    want = (RouteOutcome.ROUTED, ResetMode.NONE, sid, gen, act)
                    model[key][2] = t
            # a ROUTED message at the time the key's activity stands at
            # changes nothing and is not logged
            logged = not (want[0] is RouteOutcome.ROUTED and t == want[4])
            head += logged
            log_time = t
            seen.add((r.outcome, r.reason, logged))
            want = want + (head if logged else 0,)
            got = (r.outcome, r.reason, r.session_id, r.generation, r.last_activity_ms, r.lsn)
            self.assertEqual(got, want, f"step {step}: {key} now={now} mode={mode.name} idle={idle}s "
                                        f"boundary={boundary}")
        self.assertEqual(seen, {(RouteOutcome.CREATED, ResetMode.NONE, True), (RouteOutcome.ROUTED, ResetMode.NONE, True),
                                (RouteOutcome.ROUTED, ResetMode.NONE, False),
                                (RouteOutcome.RESET, ResetMode.IDLE, True), (RouteOutcome.RESET, ResetMode.DAILY, True)})
        self.assertEqual(self.store.stats().head_lsn, head)
        for key, (sid, gen, act) in model.items():
            b = self.store.get(key)
            self.assertEqual((b.session_id, b.generation, b.last_activity_ms), (sid, gen, act))


class Expire(RouteCase):
    def test_route__expire_with_prefix_and_dry_run(self) -> None:
        """Finished cron-run keys pile up by the thousand; expire sweeps
        them by prefix, and a dry run only counts."""
        for i in range(40):
            self.at(T0 + i)
            self.route(f"agent:main:cron:nightly:run:{i:04d}", fresh_session_id=f"run-{i}")
        self.route("agent:main:telegram:dm:7", fresh_session_id="dm-7")
        self.at(T0 + 2 * HOUR)
        self.route("agent:main:cron:nightly:run:0039", fresh_session_id="zz")  # active again
        digest, head = self.store.digest(), self.store.stats().head_lsn
        n = self.store.expire(dt.timedelta(hours=1), prefix="agent:main:cron:", dry_run=True)
        self.assertEqual(n, 39)
        self.assertEqual((self.store.digest(), self.store.stats().head_lsn), (digest, head))
        self.assertEqual(self.store.expire(3600, prefix="agent:main:cron:"), 39)
        self.assertEqual(self.store.stats().head_lsn, head + 39)
        self.assertIsNone(self.store.get("agent:main:cron:nightly:run:0000"))
        self.assertEqual(self.store.session("run-0").end_reason, "expired")
        self.assertIsNotNone(self.store.get("agent:main:cron:nightly:run:0039"))
        self.assertIsNotNone(self.store.get("agent:main:telegram:dm:7"))
        self.assertEqual(self.store.expire(3600, prefix="agent:main:cron:"), 0)
        # before= an absolute time, no prefix: the DM key goes too
        self.assertEqual(self.store.expire(before=T0 + HOUR, dry_run=True), 1)
        self.assertEqual(self.store.expire(before=dt.datetime.fromtimestamp((T0 + HOUR) / 1000, UTC)), 1)
        self.assertEqual(len(self.store), 1)

    def test_route__expire_bad_arguments(self) -> None:
        with self.assertRaisesRegex(InvalidArgument, "^expire: give idle"):
            self.store.expire()
        with self.assertRaisesRegex(InvalidArgument, "give idle"):
            self.store.expire(60, before=T0)
        with self.assertRaisesRegex(InvalidArgument, "idle -5 is not a positive duration"):
            self.store.expire(-5)
        with self.assertRaisesRegex(InvalidArgument, "longer than 400"):
            self.store.expire(60, prefix="k" * 401)
        with self.assertRaisesRegex(TypeError, "dry_run must be a bool"):
            self.store.expire(60, dry_run=1)  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "prefix must be str or bytes"):
            self.store.expire(60, prefix=5)  # type: ignore[arg-type]


class AsyncRoute(RouteCase):
    def test_route__async_concurrent_routes_give_one_reset(self) -> None:
        async def main() -> List[RouteResult]:
            async with bindlog.AsyncStore(os.path.join(self.dir, "async"), durability="full",
                                          clock=self.clock) as store:
                self.at(T0)
                first = await store.route(KEY, fresh_session_id="old")
                self.assertEqual(first.outcome, RouteOutcome.CREATED)
                self.at(T0 + 2 * HOUR)
                pol = ResetPolicy("idle", idle=dt.timedelta(hours=1))
                rs = await asyncio.gather(*(store.route(KEY, policy=pol, fresh_session_id=f"new-{i}")
                                            for i in range(16)))
                self.assertEqual(store.get(KEY).session_id, rs[0].session_id)
                self.assertEqual(await store.expire(1, prefix="nothing:", dry_run=True), 0)
                with self.assertRaisesRegex(InvalidArgument, "mode 'daily' needs at_hour"):
                    await store.route(KEY, mode="daily")
                return list(rs)

        rs = asyncio.run(main())
        self.assertEqual(sum(r.outcome is RouteOutcome.RESET for r in rs), 1)
        self.assertEqual(len({r.session_id for r in rs}), 1)


if __name__ == "__main__":
    unittest.main()
