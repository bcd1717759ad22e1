"""examples/gateway_turn.py -- one chat's turns on bindlog, in an asyncio gateway.

    python3 examples/gateway_turn.py [STORE_DIR]      (pip install ./bindings/python first)

A gateway routes a chat to a session key and the key to its current session.
A *run* (one turn of the agent) remembers (session, generation) when it
starts.  This program plays what every gateway meets, with the writes awaited
on the event loop (they share group commits and never block it):

1. first contact: bind the key, but only if it is still unbound;
2. a run compresses its context and continues in a child session (the split
   is a compare-and-swap on the generation and the current session), and a
   retried split is recognised;
3. /stop while a second run is compressing: its late split is STALE and
   writes nothing;
4. the change feed: a follower task prints every record as it is committed.

Every outcome is checked against what the rules predict; the program exits 1
on any surprise, so CI runs it as a test.  With no STORE_DIR it works in a
temporary directory it removes at the end.
"""
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import bindlog
from bindlog import Outcome, Record

KEY = "agent:main:telegram:dm:12345"
surprises = 0


def expect(what: str, got: object, want: object) -> None:
    global surprises
    ok = got == want
    surprises += not ok
    show = getattr(got, "name", got)                      # Outcome.STALE -> STALE
    print(f"  {'ok  ' if ok else 'FAIL'} {what}: {show}" + ("" if ok else f" (expected {want})"))


@dataclass
class Run:
    """Where a turn stands: the session it works in, the generation it started at."""
    session: str
    generation: int


def run_start(store: bindlog.AsyncStore) -> Run:
    b = store.get(KEY)                 # reads are synchronous: microseconds, no flush
    assert b is not None
    return Run(b.session_id, b.generation)


async def compress(store: bindlog.AsyncStore, run: Run, child: str) -> Outcome:
    """The turn compressed its context: publish the split.  The run goes on
    in the child only if the split is in AND nothing bumped the generation
    since the run started (an ALREADY after a /stop is not the run's)."""
    r = await store.split(KEY, run.session, child, run_generation=run.generation,
                          origin={"peer": "telegram", "chat": 12345, "via": "compression"})
    if r.outcome in (Outcome.APPLIED, Outcome.ALREADY) and r.generation == run.generation:
        run.session = child
    return r.outcome


async def follower(store: bindlog.AsyncStore, from_lsn: int, seen: List[Record]) -> None:
    async for rec in store.follow(from_lsn=from_lsn):
        print(f"    feed: lsn {rec.lsn} {rec.type.name.lower():<10} -> {rec.session_id}"
              f" (generation {rec.generation}, {rec.reason})")
        seen.append(rec)


async def gateway(path: str) -> None:
    async with bindlog.AsyncStore(path, durability="full") as store:
        seen: List[Record] = []
        feed = asyncio.create_task(follower(store, store.stats().head_lsn + 1, seen))

        print("first contact")
        r = await store.bind(KEY, "sess-A", expect="", reason="first contact")
        expect("bind A (only if unbound)", r.outcome, Outcome.APPLIED)
        r = await store.bind(KEY, "sess-B", expect="", reason="first contact")
        expect("a racing first contact binds nothing", r.outcome, Outcome.MOVED)

        print("a turn compresses and continues in a child")
        run = run_start(store)
        retry = Run(run.session, run.generation)          # as it stood before compressing
        expect("split A -> C", await compress(store, run, "sess-C"), Outcome.APPLIED)
        expect("the retried split is recognised", await compress(store, retry, "sess-C"),
               Outcome.ALREADY)
        expect("the retrying run goes on in the child", retry.session, "sess-C")

        print("/stop while the next turn is compressing")
        late = run_start(store)
        stop = await store.invalidate(KEY, reason="/stop")
        expect("/stop bumps the generation", stop.generation, late.generation + 1)
        expect("the stopped run's split is refused", await compress(store, late, "sess-D"),
               Outcome.STALE)
        expect("... and left no session behind", store.session("sess-D"), None)
        b: Optional[bindlog.Binding] = store.get(KEY)
        expect("the key still routes to the child", b.session_id if b else None, "sess-C")

        print("the change feed")
        for _ in range(100):                              # the follower runs on this loop
            if len(seen) >= 3:
                break
            await asyncio.sleep(0.01)
        feed.cancel()
        expect("records seen by the follower", [rec.type.name for rec in seen],
               ["BIND", "SPLIT", "INVALIDATE"])


def main() -> int:
    if len(sys.argv) > 1:
        asyncio.run(gateway(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="bindlog-turn-") as tmp:
            asyncio.run(gateway(str(Path(tmp) / "store")))
    print(f"{'FAILED' if surprises else 'ok'}: {surprises} surprise(s)")
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
