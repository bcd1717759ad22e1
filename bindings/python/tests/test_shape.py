"""The package's Python shape: keyword-only options, the mapping protocol,
typed Stats with the log fields, follow(until=...), snapshot(), AsyncStore
docstrings."""
from __future__ import annotations

import asyncio
import inspect
import os

from support import StoreTestCase, bindlog


class ShapeTest(StoreTestCase):
    def test_shape__options_are_keyword_only(self) -> None:
        p = os.path.join(self.dir, "kw")
        with self.assertRaises(TypeError):
            bindlog.Store(p, "none", True)  # type: ignore[misc]
        with self.assertRaises(TypeError):
            bindlog.AsyncStore(p, "none")  # type: ignore[misc]
        with bindlog.Store(p, durability="none", read_only=False) as s:
            self.assertEqual(s.durability, "none")
        sig = inspect.signature(bindlog.Store.__init__)
        self.assertIs(sig.parameters["read_only"].kind, inspect.Parameter.KEYWORD_ONLY)

    def test_shape__mapping_protocol(self) -> None:
        s = self.store
        self.assertEqual(len(s), 0)
        self.assertTrue(s, "an empty store is still true")
        s.bind("b", "B")
        s.bind("a", "A")
        s.bind("c", "C")
        s.unbind("c")
        self.assertEqual(s["a"].session_id, "A")
        with self.assertRaises(KeyError):
            s["c"]  # unbound: a tombstone
        with self.assertRaises(KeyError):
            s["never"]
        self.assertEqual(len(s), 2)
        self.assertEqual(list(s), ["a", "b"])
        self.assertIn("a", s)
        self.assertNotIn("c", s)

    def test_shape__stats_has_the_log_fields_and_typed_events(self) -> None:
        self.store.bind("k", "A")
        st = self.store.stats()
        self.assertEqual(st.events["bind"]["applied"], 1)
        self.assertEqual(set(st.events["split"]), {"applied", "already", "stale", "moved", "error"})
        self.assertGreater(st.log_size, 0)
        self.assertLessEqual(st.checkpoint_lsn, st.head_lsn)
        self.assertGreaterEqual(st.log_used, 0)

    def test_shape__follow_until_head_stops_at_the_head_at_call_time(self) -> None:
        s = self.store
        for i in range(5):
            s.bind(f"k{i}", f"s{i}")
        feed = s.follow(1, until="head")
        s.bind("later", "L")  # after the call: not part of it
        self.assertEqual([r.lsn for r in feed], [1, 2, 3, 4, 5])
        self.assertEqual([r.lsn for r in s.follow(3, until=4)], [3, 4])
        self.assertEqual(list(s.follow(9, until="head")), [])
        with self.assertRaises(TypeError):
            s.follow(1, until="tail")  # type: ignore[arg-type]

        async def main() -> list:
            async with bindlog.AsyncStore(os.path.join(self.dir, "a"), durability="none") as a:
                await a.bind("x", "X")
                await a.bind("y", "Y")
                return [r.lsn async for r in a.follow(1, until="head")]
        self.assertEqual(asyncio.run(main()), [1, 2])

    def test_shape__snapshot_reads_as_of_its_head(self) -> None:
        s = self.store
        g = s.bind("k", "A").generation
        s.bind("gone", "G")
        with s.snapshot() as snap:
            head = snap.head_lsn
            s.split("k", "A", "B", g)
            s.invalidate("k")
            s.unbind("gone")
            s.bind("new", "N")
            self.assertEqual(snap["k"].session_id, "A")
            self.assertEqual(snap.generation("k"), g)
            self.assertIn("gone", snap)
            self.assertNotIn("new", snap)
            self.assertIsNone(snap.get("new"))
            a = snap.session("A")
            assert a is not None
            self.assertTrue(a.live, "A ended after the snapshot: live in it")
            self.assertIsNone(snap.session("B"), "B was created after the snapshot")
            g2 = snap.session("G")
            assert g2 is not None and g2.live
        self.assertEqual(head, 2)
        self.assertEqual(s["k"].session_id, "B")
        self.assertFalse(s.session("A").live)  # type: ignore[union-attr]
        with self.assertRaises(ValueError):
            snap.get("k")

    def test_shape__asyncstore_docstrings_carry_the_semantics(self) -> None:
        for name in ("bind", "new_session", "split", "invalidate", "unbind", "apply_batch", "get",
                     "session", "history", "log", "stats", "follow", "wait", "close"):
            doc = inspect.getdoc(getattr(bindlog.AsyncStore, name)) or ""
            self.assertGreater(len(doc.splitlines()), 1, f"AsyncStore.{name} has a one-line docstring")
        self.assertIn("is_current", inspect.getdoc(bindlog.AsyncStore.split) or "")
