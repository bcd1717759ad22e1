"""check, replay, lsn_at_time, compact, export/import and vacuum.

Each is tested when the loaded libbindlog exports it (bindlog.has_feature);
when it does not, the binding must raise NotImplementedError naming the
missing C symbol, which is tested instead.
"""
from __future__ import annotations

import io
import os
import unittest

from support import StoreTestCase

import bindlog
from bindlog import Outcome


def has(name: str) -> bool:
    return bindlog.has_feature(name)


class Missing(StoreTestCase):
    def test_missing_functions_raise_not_implemented(self) -> None:
        calls = {
            "check": lambda: self.store.check(),
            "replay": lambda: self.store.replay(os.path.join(self.dir, "r")),
            "lsn_at_time": lambda: self.store.lsn_at_time(0),
            "compact": lambda: self.store.compact(1),
            "export": lambda: self.store.export(io.BytesIO()),
            "import": lambda: self.store.import_(io.BytesIO(b"")),
            "vacuum": lambda: bindlog.vacuum(self.path),
        }
        missing = [n for n in calls if not has(n)]
        if not missing:
            self.skipTest("the library has every maintenance function")
        for name in missing:
            with self.subTest(name=name):
                with self.assertRaises(NotImplementedError) as cm:
                    calls[name]()
                self.assertIn("bindlog_" + name, str(cm.exception))


class Maintenance(StoreTestCase):
    def setUp(self) -> None:
        super().setUp()
        s = self.store
        self.digests = {0: s.digest()}
        for i in range(6):
            s.bind(f"k{i % 3}", f"s{i}", origin={"i": i})
            self.digests[s.stats().head_lsn] = s.digest()
        b = s.get("k0")
        r = s.split("k0", b.session_id, "c0", b.generation, origin=b"child")
        self.assertIs(r.outcome, Outcome.APPLIED)
        self.digests[r.lsn] = s.digest()
        s.invalidate("k1")
        s.unbind("k2")
        self.head = s.stats().head_lsn
        self.digests[self.head] = s.digest()

    @unittest.skipUnless(has("check"), "no bindlog_check in this library")
    def test_check_healthy_store(self) -> None:
        calls = []
        rep = self.store.check(progress=lambda done, total: calls.append((done, total)))
        self.assertTrue(rep.ok, rep.message)
        self.assertEqual(rep.problems, 0)
        self.assertEqual((rep.records, rep.head_lsn, rep.first_bad_lsn), (self.head, self.head, 0))
        self.assertEqual(rep.state_digest, self.store.digest())
        self.assertEqual(rep.replay_digest, rep.state_digest)
        self.assertEqual((rep.first_bad_key, rep.message), ("", ""))

    @unittest.skipUnless(has("replay"), "no bindlog_replay in this library")
    def test_replay_to_head_and_to_an_lsn(self) -> None:
        out = os.path.join(self.dir, "replayed")
        calls = []
        res = self.store.replay(out, progress=lambda d, t: calls.append((d, t)))
        self.assertEqual((res.digest, res.last_lsn, res.path), (self.store.digest(), self.head, out))
        self.assertTrue(calls)
        self.assertEqual([d for d, _ in calls], sorted(d for d, _ in calls))
        with bindlog.Store(out, read_only=True) as r:
            self.assertEqual(r.digest(), self.store.digest())
            self.assertEqual([x.lsn for x in r.log()], list(range(1, self.head + 1)))
        # point in time: the state right after each LSN
        for lsn in (1, 3, 7):
            res = self.store.replay(os.path.join(self.dir, f"at{lsn}"), to_lsn=lsn)
            self.assertEqual(res.last_lsn, lsn)
            self.assertEqual(res.digest, self.digests[lsn], lsn)
        # the target must be new or empty
        with self.assertRaises(bindlog.BindlogError):
            self.store.replay(out)

    @unittest.skipUnless(has("replay"), "no bindlog_replay in this library")
    def test_progress_exception_is_raised_after_the_call(self) -> None:
        def boom(done: int, total: int) -> None:
            raise KeyError("stop")

        with self.assertRaises(KeyError):
            self.store.replay(os.path.join(self.dir, "p"), progress=boom)

    @unittest.skipUnless(has("lsn_at_time"), "no bindlog_lsn_at_time in this library")
    def test_lsn_at_time(self) -> None:
        recs = list(self.store.log())
        self.assertEqual(self.store.lsn_at_time(0), 1)
        self.assertEqual(self.store.lsn_at_time(recs[-1].time_ms + 1), self.head + 1)
        self.assertEqual(self.store.lsn_at_time(recs[3].time_ms),
                         min(r.lsn for r in recs if r.time_ms >= recs[3].time_ms))

    @unittest.skipUnless(has("compact"), "no bindlog_compact in this library")
    def test_compact_keeps_the_state(self) -> None:
        before = self.store.digest()
        removed = self.store.compact(5)
        self.assertEqual(removed, 4)
        st = self.store.stats()
        self.assertEqual((st.base_lsn, st.log_records, st.head_lsn), (4, self.head - 4, self.head))
        self.assertEqual([r.lsn for r in self.store.log()], list(range(5, self.head + 1)))
        self.assertEqual(self.store.digest(), before)
        if has("check"):
            self.assertTrue(self.store.check().ok)
        if has("replay"):
            self.assertEqual(self.store.replay(os.path.join(self.dir, "c")).digest, before)
        self.assertEqual(self.store.compact(1), 0)

    @unittest.skipUnless(has("export") and has("import"), "no bindlog_export/import in this library")
    def test_export_import_roundtrip(self) -> None:
        path = os.path.join(self.dir, "full.stream")
        self.assertEqual(self.store.export(path), self.head)
        buf = io.BytesIO()
        self.assertEqual(self.store.export(buf), self.head)
        with open(path, "rb") as f:
            self.assertEqual(buf.getvalue(), f.read())
        # into an empty store, from a path, a BytesIO and an open file
        for i, src in enumerate((path, io.BytesIO(buf.getvalue()), open(path, "rb"))):
            with self.subTest(source=type(src).__name__), \
                    bindlog.Store(os.path.join(self.dir, f"restored{i}"), durability="none") as r:
                self.assertEqual(r.import_(src), self.head)
                self.assertEqual(r.digest(), self.store.digest())
                if hasattr(src, "close"):
                    src.close()
        # a full stream into a non-empty store is refused, nothing applied
        with self.assertRaises(bindlog.Exists):
            self.store.import_(path)
        # incremental: only the new records, appended to the restored copy
        self.store.bind("k-new", "s-new")
        inc = io.BytesIO()
        self.assertEqual(self.store.export(inc, from_lsn=self.head + 1), 1)
        with bindlog.Store(os.path.join(self.dir, "restored0")) as r:
            inc.seek(0)
            self.assertEqual(r.import_(inc), 1)
            self.assertEqual(r.digest(), self.store.digest())

    @unittest.skipUnless(has("export") and has("import"), "no bindlog_export/import in this library")
    def test_import_refuses_torn_and_altered_streams(self) -> None:
        buf = io.BytesIO()
        self.store.export(buf)
        data = buf.getvalue()
        altered = bytearray(data)
        altered[len(data) // 2] ^= 0x40
        for name, bad in (("torn", data[: len(data) // 2]), ("altered", bytes(altered))):
            with self.subTest(stream=name), \
                    bindlog.Store(os.path.join(self.dir, f"bad-{name}"), durability="none") as r:
                with self.assertRaises(bindlog.BindlogError) as cm:
                    r.import_(io.BytesIO(bad))
                self.assertIsInstance(cm.exception, (bindlog.Corrupt, bindlog.VersionMismatch))
                self.assertLessEqual(cm.exception.offset, len(bad))
                self.assertEqual(r.stats().head_lsn, 0)

    @unittest.skipUnless(has("vacuum"), "no bindlog_vacuum in this library")
    def test_vacuum(self) -> None:
        with self.assertRaises(bindlog.Busy):
            bindlog.vacuum(self.path)  # this Store is a writer
        digest = self.store.digest()
        self.store.close()
        before, after = bindlog.vacuum(self.path)
        self.assertGreater(before, 0)
        self.assertLessEqual(after, before)
        with bindlog.Store(self.path) as s:
            self.assertEqual(s.digest(), digest)


if __name__ == "__main__":
    unittest.main()
