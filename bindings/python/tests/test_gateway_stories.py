"""The gateway's regression stories, written as a gateway uses the store.

A *runner* starts a turn by reading the key's binding and generation; the
agent may compress its context into a child session and publish that with
``split(key, parent, child, run_generation)``.  Meanwhile the user may type
/stop, /new or /resume, which the gateway turns into invalidate, new_session
and bind.  The split's outcome tells the runner what happened.
"""
from __future__ import annotations

import unittest
from dataclasses import dataclass
from typing import Optional

from support import StoreTestCase

import bindlog
from bindlog import ANY_GENERATION, Outcome

KEY = "agent:main:telegram:dm:12345"


@dataclass
class Turn:
    """What a runner remembers when a turn starts."""

    key: str
    session_id: str
    generation: int


class Gateway:
    """The part of a gateway that talks to the store."""

    def __init__(self, store: bindlog.Store) -> None:
        self.store = store

    def first_contact(self, key: str, session_id: str, peer: dict) -> None:
        r = self.store.bind(key, session_id, expect="", origin=peer)
        assert r.outcome in (Outcome.APPLIED, Outcome.ALREADY), r

    def start_turn(self, key: str) -> Turn:
        b = self.store.get(key)
        assert b is not None, "no binding"
        return Turn(key, b.session_id, b.generation)

    def publish_compression(self, turn: Turn, child_id: str, origin: Optional[dict] = None,
                            check_generation: bool = True) -> bindlog.Result:
        gen = turn.generation if check_generation else ANY_GENERATION
        r = self.store.split(turn.key, turn.session_id, child_id, gen, origin=origin)
        if r.outcome in (Outcome.APPLIED, Outcome.ALREADY):
            turn.session_id = child_id  # the run continues in the child
        return r

    def stop(self, key: str) -> bindlog.Result:
        return self.store.invalidate(key, reason="/stop")

    def new(self, key: str, session_id: str, peer: dict) -> bindlog.Result:
        return self.store.new_session(key, session_id, reason="/new", origin=peer)

    def resume(self, key: str, session_id: str) -> bindlog.Result:
        return self.store.bind(key, session_id, reason="/resume")


class GatewayStories(StoreTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.gw = Gateway(self.store)
        self.peer = {"platform": "telegram", "chat_id": 12345, "user": "ada"}
        self.gw.first_contact(KEY, "sess-A", self.peer)

    def test_1_turn_fails_after_compressing_split_is_published(self) -> None:
        turn = self.gw.start_turn(KEY)
        self.assertEqual((turn.session_id, turn.generation), ("sess-A", 1))
        child_origin = {"platform": "telegram", "chat_id": 12345, "compressed_from": "sess-A"}
        head = self.head()
        r = self.gw.publish_compression(turn, "sess-C", origin=child_origin)
        # ... and now the turn fails (the model call raises); nothing is
        # rolled back: the split was its own committed event.
        try:
            raise RuntimeError("model call failed after compression")
        except RuntimeError:
            pass
        self.assertIs(r.outcome, Outcome.APPLIED)
        self.assertEqual(r.lsn, head + 1)
        self.assertEqual(r.generation, 1)  # a split never bumps the generation
        self.assertEqual(r.session_id, "sess-C")
        # a restart reads the store afresh
        self.store.close()
        with bindlog.Store(self.path) as again:
            b = again.get(KEY)
            self.assertEqual((b.session_id, b.generation, b.lsn), ("sess-C", 1, r.lsn))
            c = again.session("sess-C")
            self.assertEqual(c.parent_id, "sess-A")
            self.assertEqual(c.key, KEY)
            self.assertTrue(c.live)
            self.assertEqual(c.origin_json(), child_origin)
            a = again.session("sess-A")
            self.assertEqual(a.end_reason, "compression")
            self.assertEqual(a.ended_lsn, r.lsn)
            self.assertEqual(a.origin_json(), self.peer)
            self.assertEqual(again.stats().head_lsn, head + 1)  # exactly one record
            rec = list(again.log(from_lsn=r.lsn))
            self.assertEqual(len(rec), 1)
            self.assertIs(rec[0].type, bindlog.EventType.SPLIT)
            self.assertEqual((rec[0].session_id, rec[0].other_id), ("sess-C", "sess-A"))
            self.assertEqual(rec[0].origin_json(), child_origin)

    def test_1b_split_without_origin_copies_the_parents(self) -> None:
        turn = self.gw.start_turn(KEY)
        self.assertIs(self.gw.publish_compression(turn, "sess-C").outcome, Outcome.APPLIED)
        self.assertEqual(self.store.session("sess-C").origin_json(), self.peer)

    def test_2_stop_and_new_while_compressing_late_split_is_stale(self) -> None:
        turn = self.gw.start_turn(KEY)
        # while the agent compresses, the user types /stop then /new
        self.assertIs(self.gw.stop(KEY).outcome, Outcome.APPLIED)
        new = self.gw.new(KEY, "sess-N", self.peer)
        self.assertIs(new.outcome, Outcome.APPLIED)
        self.assertEqual(new.generation, 3)
        head, digest = self.head(), self.store.digest()
        late = self.gw.publish_compression(turn, "sess-C", origin={"late": True})
        self.assertIs(late.outcome, Outcome.STALE)
        self.assertEqual(late.lsn, 0)
        self.assertEqual((late.session_id, late.generation), ("sess-N", 3))
        # no trace: no record, no child session, key still on the new session
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-C"))
        self.assertEqual(self.store.get(KEY).session_id, "sess-N")
        self.assertEqual([s.session_id for s in self.store.children("sess-A")], ["sess-N"])
        self.assertEqual(self.store.stats().events["split"]["stale"], 1)
        self.assertEqual(turn.session_id, "sess-A")  # the runner did not move

    def test_2b_stop_alone_makes_the_late_split_stale(self) -> None:
        turn = self.gw.start_turn(KEY)
        self.gw.stop(KEY)
        head, digest = self.head(), self.store.digest()
        self.assertIs(self.gw.publish_compression(turn, "sess-C").outcome, Outcome.STALE)
        self.assertNothingWritten(head, digest)

    def test_3_resume_moved_the_binding_late_split_is_moved(self) -> None:
        # the user had an older session B; resume happens mid-turn
        self.gw.new(KEY, "sess-B", self.peer)
        self.gw.resume(KEY, "sess-A")
        turn = self.gw.start_turn(KEY)  # a run on A at the current generation
        self.assertEqual(turn.session_id, "sess-A")
        # a runner numbering its turns would be STALE; but the run the gateway
        # did not number uses ANY_GENERATION, and the identity check stops it
        self.assertIs(self.gw.resume(KEY, "sess-B").outcome, Outcome.APPLIED)
        head, digest = self.head(), self.store.digest()
        late = self.gw.publish_compression(turn, "sess-C", check_generation=False)
        self.assertIs(late.outcome, Outcome.MOVED)
        self.assertEqual(late.session_id, "sess-B")
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-C"))
        self.assertEqual(self.store.get(KEY).session_id, "sess-B")
        # with its generation, the same late split is STALE (checked first)
        self.assertIs(self.gw.publish_compression(turn, "sess-C").outcome, Outcome.STALE)
        self.assertNothingWritten(head, digest)

    def test_3b_two_runs_of_one_generation_second_split_is_moved(self) -> None:
        run1 = self.gw.start_turn(KEY)
        run2 = self.gw.start_turn(KEY)
        self.assertIs(self.gw.publish_compression(run1, "sess-C").outcome, Outcome.APPLIED)
        head, digest = self.head(), self.store.digest()
        r = self.gw.publish_compression(run2, "sess-D")
        self.assertIs(r.outcome, Outcome.MOVED)
        self.assertEqual(r.session_id, "sess-C")
        self.assertNothingWritten(head, digest)
        self.assertIsNone(self.store.session("sess-D"))

    def test_4_retried_split_is_already(self) -> None:
        turn = self.gw.start_turn(KEY)
        original = Turn(turn.key, turn.session_id, turn.generation)
        first = self.gw.publish_compression(turn, "sess-C", origin={"try": 1})
        self.assertIs(first.outcome, Outcome.APPLIED)
        head, digest = self.head(), self.store.digest()
        # the client timed out and retries the very same split
        retry = Turn(original.key, original.session_id, original.generation)
        again = self.gw.publish_compression(retry, "sess-C", origin={"try": 2})
        self.assertIs(again.outcome, Outcome.ALREADY)
        self.assertEqual(again.lsn, 0)
        self.assertEqual((again.session_id, again.generation), ("sess-C", 1))
        self.assertNothingWritten(head, digest)
        self.assertEqual(self.store.session("sess-C").origin_json(), {"try": 1})
        # ALREADY even after /stop: the split is in; the generation says stale
        self.gw.stop(KEY)
        late = self.gw.publish_compression(Turn(KEY, "sess-A", original.generation), "sess-C")
        self.assertIs(late.outcome, Outcome.ALREADY)
        self.assertGreater(late.generation, original.generation)

    def test_chain_of_compressions_keeps_lineage(self) -> None:
        turn = self.gw.start_turn(KEY)
        for i in range(1, 6):
            r = self.gw.publish_compression(turn, f"sess-A{i}")
            self.assertIs(r.outcome, Outcome.APPLIED)
        lin = self.store.lineage("sess-A5")
        self.assertEqual([s.session_id for s in lin.ancestors],
                         ["sess-A4", "sess-A3", "sess-A2", "sess-A1", "sess-A"])
        self.assertEqual(lin.root.session_id, "sess-A")
        self.assertEqual(lin.children, ())
        self.assertEqual([r.type for r in self.store.history(KEY)],
                         [bindlog.EventType.BIND] + [bindlog.EventType.SPLIT] * 5)


if __name__ == "__main__":
    unittest.main()
