"""AsyncStore: the gateway's stories in asyncio, concurrency, the change
feed across processes, close and cancellation."""
from __future__ import annotations

import asyncio
import ctypes
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import unittest
from collections import Counter
from dataclasses import dataclass
from typing import Any, List, Optional

from support import PKG_ROOT, tmp_root

import bindlog
from bindlog import ANY_GENERATION, Outcome

KEY = "agent:main:telegram:dm:12345"
PEER = {"platform": "telegram", "chat_id": 12345, "user": "ada"}


@dataclass
class Turn:
    key: str
    session_id: str
    generation: int


class AsyncGateway:
    """The part of an asyncio gateway that talks to the store."""

    def __init__(self, store: bindlog.AsyncStore) -> None:
        self.store = store

    async def first_contact(self, key: str, session_id: str, peer: dict) -> None:
        r = await self.store.bind(key, session_id, expect="", origin=peer)
        assert r.outcome in (Outcome.APPLIED, Outcome.ALREADY), r

    def start_turn(self, key: str) -> Turn:
        b = self.store.get(key)  # a read: synchronous
        assert b is not None
        return Turn(key, b.session_id, b.generation)

    async def publish_compression(self, turn: Turn, child: str, origin: Optional[dict] = None,
                                  check_generation: bool = True) -> bindlog.Result:
        gen = turn.generation if check_generation else ANY_GENERATION
        r = await self.store.split(turn.key, turn.session_id, child, gen, origin=origin)
        if r.outcome in (Outcome.APPLIED, Outcome.ALREADY):
            turn.session_id = child
        return r


class AsyncCase(unittest.IsolatedAsyncioTestCase):
    writers = bindlog.aio.DEFAULT_WRITERS
    clock: Any = None

    async def asyncSetUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bindlog-py-aio-", dir=tmp_root())
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "store")
        self.store = bindlog.AsyncStore(self.path, durability="normal", writers=self.writers,
                                        clock=self.clock)
        self.gw = AsyncGateway(self.store)

    async def asyncTearDown(self) -> None:
        await self.store.close()

    def head(self) -> int:
        return self.store.stats().head_lsn

    def assertNothingWritten(self, head: int, digest: str) -> None:
        self.assertEqual((self.head(), self.store.digest()), (head, digest))


class SeedScenarios(AsyncCase):
    """SPEC section 2's three seed scenarios, through AsyncStore."""

    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        await self.gw.first_contact(KEY, "sess-A", PEER)

    async def test_seed_1_split_is_published_although_the_turn_fails(self) -> None:
        turn = self.gw.start_turn(KEY)
        head = self.head()
        child_origin = {"compressed_from": "sess-A"}
        r = await self.gw.publish_compression(turn, "sess-C", origin=child_origin)
        self.assertIs(r.outcome, Outcome.APPLIED)
        self.assertEqual((r.lsn, r.generation, r.session_id), (head + 1, 1, "sess-C"))
        # the turn fails now: nothing to undo, the split is its own event
        b = self.store.get(KEY)
        self.assertEqual((b.session_id, b.generation), ("sess-C", 1))
        c = self.store.session("sess-C")
        self.assertEqual((c.parent_id, c.origin_json()), ("sess-A", child_origin))
        a = self.store.session("sess-A")
        self.assertEqual((a.end_reason, a.ended_lsn), ("compression", r.lsn))
        self.assertEqual(self.head(), head + 1)  # one record
        # the retried split is ALREADY and writes nothing
        digest = self.store.digest()
        again = await self.store.split(KEY, "sess-A", "sess-C", 1, origin={"try": 2})
        self.assertIs(again.outcome, Outcome.ALREADY)
        self.assertEqual(again.lsn, 0)
        self.assertNothingWritten(head + 1, digest)

    async def test_seed_2_stop_and_new_while_compressing_make_the_split_stale(self) -> None:
        turn = self.gw.start_turn(KEY)
        self.assertIs((await self.store.invalidate(KEY, reason="/stop")).outcome, Outcome.APPLIED)
        new = await self.store.new_session(KEY, "sess-N", reason="/new", origin=PEER)
        self.assertIs(new.outcome, Outcome.APPLIED)
        head, digest = self.head(), self.store.digest()
        late = await self.gw.publish_compression(turn, "sess-C", origin={"late": True})
        self.assertIs(late.outcome, Outcome.STALE)
        self.assertEqual((late.lsn, late.session_id), (0, "sess-N"))
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-C"))
        self.assertEqual(self.store.get(KEY).session_id, "sess-N")

    async def test_seed_3_identity_guard(self) -> None:
        run1 = self.gw.start_turn(KEY)
        run2 = self.gw.start_turn(KEY)
        self.assertIs((await self.gw.publish_compression(run1, "sess-C")).outcome, Outcome.APPLIED)
        head, digest = self.head(), self.store.digest()
        r = await self.gw.publish_compression(run2, "sess-D")
        self.assertIs(r.outcome, Outcome.MOVED)
        self.assertEqual(r.session_id, "sess-C")
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-D"))
        # a run the gateway did not number (ANY_GENERATION) is still stopped
        # by the identity check after a /resume moved the key
        await self.store.new_session(KEY, "sess-B", origin=PEER)
        await self.store.bind(KEY, "sess-C", reason="/resume")
        turn = self.gw.start_turn(KEY)
        await self.store.bind(KEY, "sess-B", reason="/resume")
        head, digest = self.head(), self.store.digest()
        late = await self.gw.publish_compression(turn, "sess-E", check_generation=False)
        self.assertIs(late.outcome, Outcome.MOVED)
        self.assertNothingWritten(head, digest)


class Concurrency(AsyncCase):
    async def test_200_concurrent_splits_of_one_parent_and_generation_apply_once(self) -> None:
        await self.store.bind(KEY, "sess-A", origin=PEER)
        gen = self.store.generation(KEY)
        head = self.head()
        results = await asyncio.gather(
            *(self.store.split(KEY, "sess-A", f"sess-C{i}", gen, origin={"i": i}) for i in range(200))
        )
        outcomes = Counter(r.outcome for r in results)
        self.assertEqual(outcomes, Counter({Outcome.APPLIED: 1, Outcome.MOVED: 199}))
        winner = next(r for r in results if r.outcome is Outcome.APPLIED)
        self.assertTrue(all(r.session_id == winner.session_id for r in results))
        self.assertEqual(self.head(), head + 1)
        # the losers left no trace
        children = [s.session_id for s in self.store.sessions() if s.session_id.startswith("sess-C")]
        self.assertEqual(children, [winner.session_id])
        self.assertEqual(self.store.stats().events["split"]["moved"], 199)

    async def test_concurrent_writes_share_group_commits(self) -> None:
        keys = [f"{KEY}:{i}" for i in range(32)]
        # durability full: each commit syncs, so writes that arrive
        # meanwhile have time to gather for the next one
        async with bindlog.AsyncStore(os.path.join(self.dir, "full"), durability="full") as s:
            for rnd in range(5):
                rs = await asyncio.gather(*(s.bind(k, f"s{rnd}-{i}") for i, k in enumerate(keys)))
                self.assertTrue(all(r.applied for r in rs))
            st = s.stats()
        self.assertEqual(st.grouped_events, 5 * len(keys))
        # 160 events, awaited 32 at a time: a pool that handed the library
        # one event at a time would make one commit per event
        self.assertLess(st.commits, st.grouped_events)

    async def test_writes_awaited_together_go_in_together_and_a_refusal_is_its_own(self) -> None:
        await self.store.bind(f"{KEY}:taken", "sess-taken")
        await self.store.new_session(f"{KEY}:old", "sess-old")
        head, st0 = self.head(), self.store.stats()
        # refused in the middle of what the loop hands over in one turn:
        refused = {
            3: lambda: self.store.split(f"{KEY}:unbound", "a", "b"),       # NotFound
            7: lambda: self.store.bind(f"{KEY}:7", "sess-taken"),          # Conflict
            9: lambda: self.store.new_session(f"{KEY}:9", "sess-old"),     # Exists
        }
        calls = [refused[i]() if i in refused else self.store.bind(f"{KEY}:{i}", f"s{i}")
                 for i in range(12)]
        rs = await asyncio.gather(*calls, return_exceptions=True)
        self.assertIsInstance(rs[3], bindlog.NotFound)
        self.assertEqual(rs[3].message, f"split {KEY}:unbound: key is not bound")
        self.assertIsInstance(rs[7], bindlog.Conflict)
        self.assertIn(f"bind {KEY}:7", rs[7].message)
        self.assertIsInstance(rs[9], bindlog.Exists)
        self.assertIn(f"new_session {KEY}:9", rs[9].message)
        applied = [i for i, r in enumerate(rs) if isinstance(r, bindlog.Result)]
        self.assertEqual(applied, [0, 1, 2, 4, 5, 6, 8, 10, 11])
        self.assertTrue(all(rs[i].applied for i in applied))
        self.assertEqual(self.head(), head + 9)
        for i in applied:
            self.assertEqual(self.store.get(f"{KEY}:{i}").session_id, f"s{i}")
        self.assertIsNone(self.store.get(f"{KEY}:7"))
        self.assertEqual(self.store.get(f"{KEY}:taken").session_id, "sess-taken")
        # every call counted once, as the caller made it: the batches the
        # library refused whole are not calls of the caller's
        st = self.store.stats()
        delta = {t: {c: st.events[t][c] - st0.events[t][c] for c in st.events[t]} for t in st.events}
        self.assertEqual(delta["bind"], {"applied": 9, "already": 0, "stale": 0, "moved": 0, "error": 1})
        self.assertEqual(delta["split"], {"applied": 0, "already": 0, "stale": 0, "moved": 0, "error": 1})
        self.assertEqual(delta["new_session"], {"applied": 0, "already": 0, "stale": 0, "moved": 0, "error": 1})

    async def test_many_writes_in_one_turn_are_carried_in_parts(self) -> None:
        n = 3 * bindlog.aio.COALESCE_MAX + 5
        big = {"pad": "x" * 40_000}  # ~7 of these fill COALESCE_BYTES
        rs = await asyncio.gather(*(self.store.bind(f"{KEY}:{i}", f"s{i}", origin=big if i % 2 else None)
                                    for i in range(n)))
        self.assertTrue(all(r.applied for r in rs))
        self.assertEqual(sorted(r.lsn for r in rs), list(range(1, n + 1)))
        self.assertEqual(self.head(), n)
        self.assertEqual(json.loads(self.store.session(f"s{n - 2}").origin), big)

    async def test_racing_writes_on_shared_keys_each_count_once(self) -> None:
        """32 tasks race binds, splits, new sessions and stops on 6 shared
        keys, many refused (moved, stale, not bound, a session of another
        key): every APPLIED result is exactly one record of the log, with
        its own LSN, and the log replays to the state."""
        import random

        keys = [f"{KEY}:{i}" for i in range(6)]
        applied: List[int] = []
        errors = 0

        async def racer(t: int) -> None:
            nonlocal errors
            rnd = random.Random(t)
            for n in range(40):
                k = rnd.choice(keys)
                b = self.store.get(k)
                op = rnd.randrange(4)
                try:
                    if op == 0:
                        r = await self.store.bind(k, f"t{t}-{n}" if rnd.random() < 0.8 else "shared")
                    elif op == 1 and b is not None:
                        r = await self.store.split(k, b.session_id, f"t{t}-{n}c", b.generation)
                    elif op == 2:
                        r = await self.store.new_session(k, f"t{t}-{n}n" if rnd.random() < 0.9 else "shared")
                    else:
                        r = await self.store.invalidate(k)
                except (bindlog.NotFound, bindlog.Conflict, bindlog.Exists):
                    errors += 1
                    continue
                if r.outcome is Outcome.APPLIED:
                    applied.append(r.lsn)

        await asyncio.gather(*(racer(t) for t in range(32)))
        self.assertGreater(errors, 0)
        self.assertEqual(sorted(applied), list(range(1, self.head() + 1)))
        report = await self.store.check()
        self.assertTrue(report.ok, report.message)
        st = self.store.stats()
        calls = sum(sum(c.values()) for c in st.events.values())
        self.assertEqual(sum(c["error"] for c in st.events.values()), errors)
        self.assertEqual(calls, 32 * 40)  # one call per iteration, each counted once

    async def test_writes_too_large_for_one_frame_of_a_small_log_go_in_several(self) -> None:
        # a store made with the smallest log (64 KiB): a group's frame must
        # fit in half of it, and 64 writes with 3 KB origins do not
        path = os.path.join(self.dir, "small-log")
        lib = bindlog._ffi.load()
        opts = bindlog._ffi.bindlog_options()
        opts.version = bindlog._ffi.OPTIONS_VERSION
        opts.durability = bindlog._ffi.DURABILITY_NONE
        opts.log_size = 64 << 10
        h = ctypes.c_void_p()
        self.assertEqual(lib.bindlog_open(ctypes.byref(h), os.fsencode(path), ctypes.byref(opts)), 0)
        lib.bindlog_close(h)
        async with bindlog.AsyncStore(path, durability="none") as s:
            pad = {"pad": "p" * 3000}
            rs = await asyncio.gather(*(s.bind(f"{KEY}:{i}", f"s{i}", origin=pad) for i in range(64)))
            self.assertTrue(all(r.applied for r in rs))
            self.assertEqual(sorted(r.lsn for r in rs), list(range(1, 65)))
            self.assertEqual(json.loads(s.session("s63").origin), pad)
            # the library cuts the group commits by bytes (a quarter of the
            # log: two of these writes a group), and nothing was refused
            st = s.stats()
            self.assertEqual(st.grouped_events, 64)
            self.assertGreaterEqual(st.commits, 16)
            self.assertEqual(st.events["bind"], {"applied": 64, "already": 0, "stale": 0, "moved": 0,
                                                  "error": 0})

    async def test_a_write_runs_on_a_writer_thread_and_the_loop_keeps_running(self) -> None:
        entered, release = threading.Event(), threading.Event()
        seen: List[str] = []

        def clock() -> int:
            seen.append(threading.current_thread().name)
            entered.set()
            release.wait(30)  # the loop below must run while this waits
            return 1_700_000_000_000

        async with bindlog.AsyncStore(os.path.join(self.dir, "clocked"), durability="none",
                                      clock=clock) as s:
            task = asyncio.ensure_future(s.bind(KEY, "sess-A"))
            for _ in range(3000):
                if entered.is_set():
                    break
                await asyncio.sleep(0.01)
            self.assertTrue(entered.is_set(), "the write never reached the library")
            self.assertFalse(task.done())
            release.set()
            r = await task
            self.assertIs(r.outcome, Outcome.APPLIED)
            self.assertEqual(s.get(KEY).updated_ms, 1_700_000_000_000)
        self.assertTrue(seen and all(n.startswith("bindlog-writer") for n in seen), seen)

    async def test_a_cancelled_write_that_had_not_started_is_dropped(self) -> None:
        entered, release = threading.Event(), threading.Event()

        def clock() -> int:
            entered.set()
            release.wait(30)
            return 1_700_000_000_000

        async with bindlog.AsyncStore(os.path.join(self.dir, "one"), durability="none",
                                      clock=clock, writers=1) as s:
            first = asyncio.ensure_future(s.bind(KEY, "sess-A"))
            while not entered.is_set():
                await asyncio.sleep(0.005)
            second = asyncio.ensure_future(s.bind("other", "sess-B"))  # queued behind the first
            await asyncio.sleep(0.01)
            second.cancel()
            release.set()
            self.assertIs((await first).outcome, Outcome.APPLIED)
            with self.assertRaises(asyncio.CancelledError):
                await second
            self.assertIsNone(s.get("other"))
            self.assertEqual(s.stats().head_lsn, 1)

    async def test_close_waits_for_the_writes_already_submitted(self) -> None:
        tasks = [asyncio.ensure_future(self.store.bind(f"{KEY}:{i}", f"s{i}")) for i in range(50)]
        await asyncio.sleep(0)  # every task submits its write
        await self.store.close()
        self.assertTrue(all(t.done() for t in tasks))
        self.assertTrue(all(t.result().applied for t in tasks))
        with self.assertRaises(bindlog.StoreClosed):
            await self.store.bind(KEY, "late")
        with self.assertRaises(bindlog.StoreClosed):
            self.store.get(KEY)
        with bindlog.Store(self.path, read_only=True) as again:
            self.assertEqual(again.stats().head_lsn, 50)

    async def test_errors_carry_the_library_message(self) -> None:
        with self.assertRaises(bindlog.NotFound) as cm:
            await self.store.split("agent:main:x", "a", "b")
        self.assertEqual(cm.exception.message, "split agent:main:x: key is not bound")
        with self.assertRaises(bindlog.InvalidArgument) as cm2:
            await self.store.bind("agent:main:x", "bad\nid")
        self.assertEqual(cm2.exception.message, "bind agent:main:x: session_id contains a control character")
        with self.assertRaises(TypeError):
            await self.store.bind(5, "s")  # type: ignore[arg-type]

    async def test_batches_and_maintenance_are_awaitable(self) -> None:
        rs = await self.store.apply_batch([bindlog.Event.bind(KEY, "a"), bindlog.Event.split(KEY, "a", "b")])
        self.assertEqual([r.outcome for r in rs], [Outcome.APPLIED, Outcome.APPLIED])
        report = await self.store.check()
        self.assertTrue(report.ok, report.message)
        stream = os.path.join(self.dir, "backup.stream")
        self.assertEqual(await self.store.export(stream), 2)
        async with await bindlog.AsyncStore.open(os.path.join(self.dir, "restored")) as fresh:
            self.assertEqual(await fresh.import_(stream), 2)
            self.assertEqual(fresh.digest(), self.store.digest())


class Waiting(AsyncCase):
    async def test_wait_returns_at_once_with_a_timeout_or_on_a_write(self) -> None:
        self.assertEqual(await self.store.wait(0, timeout=0), 0)
        self.assertEqual(await self.store.wait(0, timeout=0.05), 0)  # timed out: head unchanged
        waiter = asyncio.ensure_future(self.store.wait(0))
        await asyncio.sleep(0.05)
        self.assertFalse(waiter.done())
        await self.store.bind(KEY, "a")
        self.assertEqual(await asyncio.wait_for(waiter, 10), 1)

    async def test_follow_yields_the_past_then_new_records(self) -> None:
        await self.store.bind(KEY, "a")
        await self.store.invalidate(KEY)
        got: List[bindlog.Record] = []

        async def consume() -> None:
            async for rec in self.store.follow():
                got.append(rec)
                if len(got) == 5:
                    return

        task = asyncio.ensure_future(consume())
        for i in range(3):
            await asyncio.sleep(0.02)
            await self.store.split(KEY, "a" if i == 0 else f"c{i - 1}", f"c{i}")
        await asyncio.wait_for(task, 10)
        self.assertEqual([r.lsn for r in got], [1, 2, 3, 4, 5])
        self.assertEqual([r.type.name for r in got], ["BIND", "INVALIDATE", "SPLIT", "SPLIT", "SPLIT"])
        # a timeout ends the feed once nothing new comes
        tail = [r.lsn async for r in self.store.follow(from_lsn=4, timeout=0.05)]
        self.assertEqual(tail, [4, 5])

    async def test_a_cancelled_follower_stops_at_once(self) -> None:
        task = asyncio.ensure_future(self._drain(self.store.follow()))
        await asyncio.sleep(0.05)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)

    async def test_close_ends_a_waiting_follower_with_store_closed(self) -> None:
        task = asyncio.ensure_future(self._drain(self.store.follow()))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(self.store.close(), 5)
        with self.assertRaises(bindlog.StoreClosed):
            await asyncio.wait_for(task, 5)

    @staticmethod
    async def _drain(feed: Any) -> None:
        async for _ in feed:
            pass


class Loops(unittest.TestCase):
    def test_one_store_used_by_two_loops_in_turn(self) -> None:
        d = tempfile.mkdtemp(prefix="bindlog-py-aio-", dir=tmp_root())
        self.addCleanup(shutil.rmtree, d, True)
        store = bindlog.AsyncStore(os.path.join(d, "s"), durability="none")

        async def first() -> int:
            await store.bind(KEY, "a")
            return await store.wait(1, timeout=0.05)  # its watcher runs on this loop

        async def second() -> List[int]:
            waiter = asyncio.ensure_future(store.wait(1))
            await asyncio.sleep(0.02)
            await store.invalidate(KEY)
            self.assertEqual(await asyncio.wait_for(waiter, 10), 2)
            lsns = [r.lsn async for r in store.follow(timeout=0)]
            await store.close()
            return lsns

        self.assertEqual(asyncio.run(first()), 1)
        self.assertEqual(asyncio.run(second()), [1, 2])


# ---- other processes ---------------------------------------------------------


def _other_process(path: str, what: str, n: int, go: Any, done: Any) -> None:
    """A second process: a gateway worker or an operator's tool."""
    if PKG_ROOT not in sys.path and os.environ.get("BINDLOG_TEST_INSTALLED") != "1":
        sys.path.insert(0, PKG_ROOT)
    import bindlog as bl
    if not go.wait(60):
        raise SystemExit("never told to go")
    with bl.Store(path, durability="normal") as s:
        if what == "stop":
            s.invalidate(KEY, reason="/stop")
        else:
            for i in range(n):
                s.bind(f"{KEY}:{i}", f"other-{i}")
    done.set()


class OtherProcesses(AsyncCase):
    def spawn(self, what: str, n: int = 0) -> Any:
        ctx = multiprocessing.get_context("spawn")
        go, done = ctx.Event(), ctx.Event()
        p = ctx.Process(target=_other_process, args=(self.path, what, n, go, done))
        p.start()
        self.addCleanup(p.join, 30)
        return p, go, done

    async def join(self, p: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, p.join, 60)
        self.assertEqual(p.exitcode, 0)

    async def test_a_stop_from_another_process_makes_the_running_turn_stale(self) -> None:
        await self.gw.first_contact(KEY, "sess-A", PEER)
        p, go, done = self.spawn("stop")
        turn = self.gw.start_turn(KEY)
        go.set()  # the turn is running: /stop arrives through another process
        await self.join(p)
        self.assertTrue(done.is_set())
        head, digest = self.head(), self.store.digest()
        r = await self.gw.publish_compression(turn, "sess-C")
        self.assertIs(r.outcome, Outcome.STALE)
        self.assertEqual(r.generation, turn.generation + 1)
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-C"))
        self.assertEqual(turn.session_id, "sess-A")

    async def test_follow_sees_another_process_writes(self) -> None:
        n = 25
        p, go, done = self.spawn("writes", n)
        got: List[bindlog.Record] = []

        async def consume() -> None:
            async for rec in self.store.follow(from_lsn=1):
                got.append(rec)
                if len(got) == n:
                    return

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)  # the follower is waiting before the first write
        go.set()
        await asyncio.wait_for(task, 60)
        await self.join(p)
        self.assertEqual([r.lsn for r in got], list(range(1, n + 1)))
        self.assertEqual([r.key for r in got], [f"{KEY}:{i}" for i in range(n)])


if __name__ == "__main__":
    unittest.main()
