"""Inbound routing (SPEC section 2b) through Python: Store.route(),
AsyncStore.route(), expire(), the reset policy and daily_boundary_ms().

The scenarios are the bug classes of the gateways' trackers that route()
exists to end: activity recorded before freshness is judged, the message
that triggers a reset lost, a restart re-arming the idle clock, concurrent
messages at a boundary resetting twice, a run started before a reset
writing into the new session, daily-and-idle, a clock going back, and
``mode none`` resetting anyway."""
from __future__ import annotations

import datetime as dt
import unittest

from support import StoreTestCase  # noqa: F401  (sets up the import path)

import bindlog
from bindlog import InvalidArgument, ResetMode, ResetPolicy, daily_boundary_ms

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


if __name__ == "__main__":
    unittest.main()
