"""Store.import_entries: a gateway's sessions.json moved in (SPEC section 8)."""
from __future__ import annotations

import asyncio
import json
import os
import unittest
from typing import Any, Dict, List

from support import StoreTestCase

import bindlog
from bindlog import ImportEntry, Outcome

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

SESSIONS_JSON = """{
  "agent:main:telegram:dm:1": {"sessionId": "s-1", "updatedAt": 1767225600000, "chatType": "direct"},
  "agent:main:slack:dm:U1": {"sessionId": "shared-1", "updatedAt": 1767225700000},
  "agent:main:slack:dm:U2": {"sessionId": "shared-1", "updatedAt": 1767225800000},
  "agent:main:discord:chan:7": {"sessionId": "s-7", "updatedAt": 1767225500000}
}"""


def entries_from_openclaw(text: str) -> List[ImportEntry]:
    """docs/python.md's migration recipe: one entry per key, the entry
    itself as the session's origin."""
    table: Dict[str, Dict[str, Any]] = json.loads(text)
    return [ImportEntry(key, e["sessionId"], int(e["updatedAt"]), origin=e) for key, e in table.items()]


@unittest.skipUnless(bindlog.has_feature("import_entries"), "no bindlog_import_entries in this library")
class ImportEntries(StoreTestCase):
    def test_a_sessions_json_goes_in_in_time_order_with_its_times(self) -> None:
        s = self.store
        outs = s.import_entries(entries_from_openclaw(SESSIONS_JSON))
        self.assertEqual([o.entry.key for o in outs], list(json.loads(SESSIONS_JSON)))  # entries' order
        by_key = {o.entry.key: o for o in outs}
        self.assertIs(by_key["agent:main:telegram:dm:1"].outcome, Outcome.APPLIED)
        self.assertIs(by_key["agent:main:discord:chan:7"].outcome, Outcome.APPLIED)
        self.assertIs(by_key["agent:main:slack:dm:U1"].outcome, Outcome.APPLIED)
        # two keys naming one session: the earlier entry wins, the later is
        # refused alone, by key, naming the key that holds the session
        late = by_key["agent:main:slack:dm:U2"]
        self.assertIsNone(late.outcome)
        self.assertFalse(late.imported)
        self.assertIsInstance(late.error, bindlog.Conflict)
        self.assertEqual(str(late.error.message),  # type: ignore[union-attr]
                         "import_entries agent:main:slack:dm:U2: session shared-1 is the live binding "
                         "of key agent:main:slack:dm:U1")
        # logged in order of time, with those times, reason "import"
        log = list(s.log())
        self.assertEqual([r.key for r in log],
                         ["agent:main:discord:chan:7", "agent:main:telegram:dm:1", "agent:main:slack:dm:U1"])
        self.assertEqual([r.time_ms for r in log], [1767225500000, 1767225600000, 1767225700000])
        self.assertEqual({r.reason for r in log}, {"import"})
        self.assertEqual(s.session("s-1").origin_json(),
                         {"sessionId": "s-1", "updatedAt": 1767225600000, "chatType": "direct"})
        self.assertEqual(s.get("agent:main:telegram:dm:1").updated_ms, 1767225600000)
        # a second run changes nothing
        head, digest = self.head(), s.digest()
        again = s.import_entries(entries_from_openclaw(SESSIONS_JSON))
        self.assertEqual([o.outcome for o in again if o.error is None], [Outcome.ALREADY] * 3)
        self.assertNothingWritten(head, digest)

    def test_a_key_bound_elsewhere_is_moved_and_left_alone(self) -> None:
        s = self.store
        s.bind("k", "live")
        (o,) = s.import_entries([ImportEntry("k", "old", T0)])
        self.assertIs(o.outcome, Outcome.MOVED)
        self.assertEqual(o.result.session_id, "live")  # type: ignore[union-attr]
        self.assertEqual(s.get("k").session_id, "live")

    def test_bad_entries_are_refused_alone(self) -> None:
        s = self.store
        outs = s.import_entries([
            ImportEntry("nul\0key", "a", T0),
            ImportEntry("ok-1", "bell\x07", T0),
            ImportEntry("ok-2", "b", -5),
            ImportEntry("ok-3", "c", T0, origin=b"x" * (bindlog.ORIGIN_MAX + 1)),
            ImportEntry("ok-4", "d", T0, origin={"n": 4}),
        ])
        for o in outs[:4]:
            self.assertIsInstance(o.error, bindlog.InvalidArgument, o)
            self.assertTrue(str(o.error.message).startswith("import_entries "), o.error)  # type: ignore[union-attr]
        self.assertIn("nul\\x00key", outs[0].error.message)  # type: ignore[union-attr]
        self.assertIs(outs[4].outcome, Outcome.APPLIED)
        self.assertEqual(self.head(), 1)
        with self.assertRaises(TypeError):
            s.import_entries([("k", "s", T0)])  # type: ignore[list-item]
        with self.assertRaises(TypeError):
            s.import_entries([ImportEntry("k", "s", "yesterday")])  # type: ignore[arg-type]
        self.assertEqual(s.import_entries([]), [])

    def test_a_read_only_store_refuses_the_whole_call(self) -> None:
        with bindlog.Store(self.path, read_only=True) as ro:
            with self.assertRaises(bindlog.ReadOnly) as cm:
                ro.import_entries([ImportEntry("k", "s", T0)])
            (o,) = cm.exception.outcomes  # type: ignore[attr-defined]
            self.assertIsInstance(o.error, bindlog.ReadOnly)
            self.assertFalse(o.imported)
        self.assertIsNone(self.store.get("k"))

    def test_through_async_store(self) -> None:
        async def go() -> List[bindlog.ImportOutcome]:
            async with bindlog.AsyncStore(os.path.join(self.dir, "aio"), durability="none") as s:
                return await s.import_entries(entries_from_openclaw(SESSIONS_JSON))

        outs = asyncio.run(go())
        self.assertEqual(sum(o.imported for o in outs), 3)


if __name__ == "__main__":
    unittest.main()
