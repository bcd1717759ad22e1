#!/usr/bin/env python3
"""The checked split from Python: bindlog's Store against the sqlite3 module.

    python3 bindings/python/bench/split_bench.py [--seconds 3] [--slices 6]
        [--writers 1,16] [--dir DIR]

The gateway's end of turn in FULL durability, as a Python gateway that moved
its routing index to SQLite makes it today, and with bindlog:

  bindlog   Store.split(key, parent, child, run_generation, origin): the
            compare-and-swap in one logged transaction (durability "full");
  sqlite3   the stdlib module, WAL mode, synchronous=FULL, one connection
            shared by the threads under a lock (the faster way: see
            sqlite_contender), doing the same checks and writes as bindlog's SPLIT
            in one BEGIN IMMEDIATE transaction: read the key's row, compare
            generation and binding, create the child session, end the
            parent, move the key, append a log row.

For each writer count (threads, each splitting its own 64 keys again and
again; every split is applied), the two contenders run in --slices
alternating turns of --seconds / --slices each, so that both see the same
moments of a shared disk; each thread carries on from one turn to the next.
Prints one row per contender (splits/s, p50 and p99 latency of one split)
and the ratio bindlog / sqlite3 per writer count, with the load average,
since the figures move with what else the machine runs.  Exit status 1 if a
split was not applied.

The package is the installed one when there is one (with its own library),
else the source tree's with the library BINDLOG_LIBRARY names.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import bindlog  # the installed package, with its own library
except ImportError:  # the source tree's (then BINDLOG_LIBRARY names the library)
    sys.path.insert(0, os.path.dirname(HERE))
    import bindlog

KEYS_PER_WRITER = 64
ORIGIN = b'{"peer":"telegram","chat":12345,"msg":7,"via":"bench"}'


def pct(sorted_values: List[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


class Contender:
    """`writers` threads, each splitting its own keys; split(w, i) makes
    writer w's i-th split and returns True when it was applied."""

    def __init__(self, name: str, writers: int, split: Callable[[int, int], bool],
                 close: Callable[[], None]) -> None:
        self.name, self.writers, self.split, self.close = name, writers, split, close
        self.next = [0] * writers
        self.lat: List[float] = []
        self.ops = 0
        self.bad = 0
        self.secs = 0.0
        self.errors: List[BaseException] = []

    def turn(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        lock = threading.Lock()

        def run(w: int) -> None:
            lat: List[float] = []
            bad = 0
            try:
                while time.perf_counter() < end:
                    t = time.perf_counter()
                    ok = self.split(w, self.next[w])
                    lat.append(time.perf_counter() - t)
                    self.next[w] += 1
                    bad += not ok
            except BaseException as e:  # reported after the turn
                with lock:
                    self.errors.append(e)
            with lock:
                self.lat.extend(lat)
                self.ops += len(lat)
                self.bad += bad

        t0 = time.perf_counter()
        threads = [threading.Thread(target=run, args=(w,)) for w in range(self.writers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.secs += time.perf_counter() - t0
        if self.errors:
            raise self.errors[0]


def keyspace(writers: int) -> List[Dict[str, List[str]]]:
    return [{"keys": [f"agent:main:telegram:dm:{w}-{k}" for k in range(KEYS_PER_WRITER)],
             "cur": [f"w{w}-k{k}-s0" for k in range(KEYS_PER_WRITER)]} for w in range(writers)]


def child_of(w: int, i: int) -> str:
    return f"w{w}-k{i % KEYS_PER_WRITER}-s{i // KEYS_PER_WRITER + 1}"


def bindlog_contender(path: str, writers: int) -> Contender:
    store = bindlog.Store(path, durability="full")
    ks = keyspace(writers)
    store.apply_batch([bindlog.Event.bind(key, cur) for s in ks
                       for key, cur in zip(s["keys"], s["cur"])])

    def split(w: int, i: int) -> bool:
        k = i % KEYS_PER_WRITER
        child = child_of(w, i)
        r = store.split(ks[w]["keys"][k], ks[w]["cur"][k], child, 1, origin=ORIGIN)
        ks[w]["cur"][k] = child
        return r.outcome == bindlog.Outcome.APPLIED

    return Contender("bindlog Store, FULL", writers, split, store.close)


SCHEMA = """
CREATE TABLE bindings(key TEXT PRIMARY KEY, session_id TEXT NOT NULL,
    generation INTEGER NOT NULL, lsn INTEGER NOT NULL, updated_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE sessions(id TEXT PRIMARY KEY, key TEXT NOT NULL, parent_id TEXT NOT NULL,
    created_lsn INTEGER NOT NULL, created_ms INTEGER NOT NULL, ended_lsn INTEGER NOT NULL DEFAULT 0,
    ended_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '', origin BLOB) WITHOUT ROWID;
CREATE TABLE log(lsn INTEGER PRIMARY KEY, type INTEGER NOT NULL, time_ms INTEGER NOT NULL,
    key TEXT NOT NULL, session_id TEXT NOT NULL, other_id TEXT NOT NULL, reason TEXT NOT NULL,
    generation INTEGER NOT NULL, origin BLOB);
"""


def sqlite_connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def sqlite_contender(path: str, writers: int) -> Contender:
    setup = sqlite_connect(path)
    setup.executescript(SCHEMA)
    ks = keyspace(writers)
    setup.execute("BEGIN IMMEDIATE")
    for s in ks:
        for key, cur in zip(s["keys"], s["cur"]):
            setup.execute("INSERT INTO bindings VALUES (?, ?, 1, 0, 0)", (key, cur))
            setup.execute("INSERT INTO sessions(id, key, parent_id, created_lsn, created_ms) "
                          "VALUES (?, ?, '', 0, 0)", (cur, key))
    setup.execute("COMMIT")
    setup.close()
    # One connection shared by the threads under a lock: the fastest way
    # for one process.  A connection per thread lets SQLite's busy handler
    # decide who writes next, and it sleeps (up to 100 ms) while it waits:
    # 16 such threads made ~250 splits/s here, a tenth of this.
    db = sqlite_connect(path)
    lock = threading.Lock()

    def checked_split(db: sqlite3.Connection, key: str, parent: str, child: str, gen: int) -> str:
        # the same checks, in the same order, as bindlog's SPLIT
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT session_id, generation FROM bindings WHERE key = ?",
                             (key,)).fetchone()
            if row is None:
                outcome = "notfound"
            elif row[0] == child:
                outcome = "already"
            elif row[1] != gen:
                outcome = "stale"
            elif row[0] != parent:
                outcome = "moved"
            elif db.execute("SELECT 1 FROM sessions WHERE id = ?", (child,)).fetchone():
                raise RuntimeError("EEXIST")
            else:
                lsn = db.execute("SELECT coalesce(max(lsn), 0) + 1 FROM log").fetchone()[0]
                now = int(time.time() * 1000)
                db.execute("INSERT INTO sessions(id, key, parent_id, created_lsn, created_ms, origin) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (child, key, parent, lsn, now, ORIGIN))
                db.execute("UPDATE sessions SET ended_lsn = ?, ended_ms = ?, end_reason = ? "
                           "WHERE id = ?", (lsn, now, "compression", parent))
                db.execute("UPDATE bindings SET session_id = ?, lsn = ?, updated_ms = ? WHERE key = ?",
                           (child, lsn, now, key))
                db.execute("INSERT INTO log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (lsn, 3, now, key, child, parent, "compression", gen, ORIGIN))
                outcome = "applied"
            db.execute("COMMIT")
            return outcome
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def split(w: int, i: int) -> bool:
        k = i % KEYS_PER_WRITER
        child = child_of(w, i)
        with lock:
            outcome = checked_split(db, ks[w]["keys"][k], ks[w]["cur"][k], child, 1)
        ks[w]["cur"][k] = child
        return bool(outcome == "applied")

    return Contender("sqlite3 WAL, synchronous=FULL", writers, split, db.close)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per contender and writer count")
    ap.add_argument("--slices", type=int, default=6, help="alternating turns")
    ap.add_argument("--writers", default="1,16", help="comma-separated thread counts")
    ap.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    a = ap.parse_args()
    writer_counts = [int(x) for x in a.writers.split(",") if x]
    if a.seconds <= 0 or a.slices < 1 or not writer_counts or min(writer_counts) < 1:
        ap.error("--seconds must be > 0, --slices >= 1, --writers positive integers")
    scratch = tempfile.mkdtemp(prefix="bindlog-py-split-", dir=a.dir)
    load0 = os.getloadavg()
    print(f"bindlog {bindlog.__version__} ({bindlog.library_version()}), sqlite {sqlite3.sqlite_version}, "
          f"python {sys.version.split()[0]}; {os.cpu_count()} cores; load average "
          + " ".join(f"{x:.2f}" for x in load0))
    print(f"\nThe checked split in FULL durability, {a.seconds:g} s per row in {a.slices} alternating turns:\n")
    print("| store | writers | splits/s | split p50 ms | split p99 ms |")
    print("|---|---:|---:|---:|---:|")
    ratios = []
    failed = 0
    try:
        for n, w in enumerate(writer_counts):
            cs = [bindlog_contender(os.path.join(scratch, f"b{n}"), w),
                  sqlite_contender(os.path.join(scratch, f"s{n}.sqlite"), w)]
            try:
                for k in range(a.slices):
                    for j in range(len(cs)):  # a different one goes first each turn
                        cs[(j + k) % len(cs)].turn(a.seconds / a.slices)
            finally:
                for c in cs:
                    c.close()
            rates = []
            for c in cs:
                c.lat.sort()
                rate = c.ops / c.secs
                rates.append(rate)
                print(f"| {c.name} | {w} | {rate:.0f} | {pct(c.lat, 50) * 1e3:.2f} | "
                      f"{pct(c.lat, 99) * 1e3:.2f} |")
                if c.bad:
                    print(f"{c.name} x{w}: {c.bad} splits were not applied", file=sys.stderr)
                    failed = 1
            ratios.append((w, rates[0] / rates[1]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    for w, r in ratios:
        print(f"x{w}: bindlog / sqlite3 = {r:.2f}x the splits per second")
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return failed


if __name__ == "__main__":
    sys.exit(main())
