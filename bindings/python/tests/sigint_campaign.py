#!/usr/bin/env python3
"""Ctrl-C campaign: SIGINT at random points into a process using a store,
which must then close it and exit, and leave a store that checks clean.

    python3 sigint_campaign.py [--tries N] [--modes a,b,...] [--timeout S]

Each try starts a child (this file with --child MODE DIR) that opens a
store (durability "full"), runs MODE in a loop until interrupted, and in
``finally`` closes the store (sync modes) or awaits ``AsyncStore.close()``
(async modes), then prints ``closed`` and exits 0.  The parent sends one
SIGINT at a random moment 0..0.25 s after the child is busy, and counts:

  hang      the child did not exit within --timeout seconds (killed -9)
  bad-exit  the child exited without printing ``closed``
  bad-check ``Store.check()`` on the store afterwards found problems

Modes: split (FULL splits in the main thread), threads (splits in the
main thread while two threads read and iterate), read (get/session),
iter (bindings/log/history iterators, some left half-read), follow
(follow() with timeout), async (AsyncStore writes from 8 tasks),
async_follow (AsyncStore.follow while tasks write).

Prints one line per mode, ``MODE: N tries, H hang, B bad-exit, C
bad-check``, and exits 1 if any count is non-zero.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("split", "threads", "read", "iter", "follow", "async", "async_follow")


def _import_bindlog():  # type: ignore[no-untyped-def]
    if os.environ.get("BINDLOG_TEST_INSTALLED") != "1":
        sys.path.insert(0, os.path.dirname(HERE))
    import bindlog
    return bindlog


# ---- the child ------------------------------------------------------------------


def child(mode: str, path: str) -> int:
    import faulthandler

    # the parent sends SIGUSR1 to a hung child: every thread's Python stack goes to stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    bindlog = _import_bindlog()
    key = "agent:main:telegram:1"
    if mode.startswith("async"):
        import asyncio

        async def amain() -> None:
            store = bindlog.AsyncStore(path, durability="full", writers=4)
            try:
                await store.bind(key, "s0")
                n = [0]

                async def writer(i: int) -> None:
                    k = f"{key}:{i}"
                    await store.bind(k, f"{k}:0")
                    while True:
                        cur = store.get(k)
                        n[0] += 1
                        await store.split(k, cur.session_id, f"{k}:{n[0]}", cur.generation)

                async def follower() -> None:
                    async for _rec in store.follow(1):
                        pass

                tasks = [asyncio.ensure_future(writer(i)) for i in range(8)]
                if mode == "async_follow":
                    tasks.append(asyncio.ensure_future(follower()))
                print("busy", flush=True)
                await asyncio.gather(*tasks)
            finally:
                await store.close()

        try:
            asyncio.run(amain())
        except (KeyboardInterrupt, asyncio.CancelledError):
            pass
        print("closed", flush=True)
        return 0

    store = bindlog.Store(path, durability="full")
    stop = threading.Event()
    helpers = []
    try:
        store.bind(key, "s0")
        for i in range(20):
            store.bind(f"{key}:{i}", f"x{i}")

        def reader() -> None:
            try:
                while not stop.is_set():
                    store.get(key)
                    for _ in store.bindings():
                        pass
                    store.stats()
            except bindlog.StoreClosed:
                pass

        if mode == "threads":
            for _ in range(2):
                t = threading.Thread(target=reader, daemon=True)
                t.start()
                helpers.append(t)
        print("busy", flush=True)
        n = 0
        while True:
            n += 1
            if mode in ("split", "threads"):
                cur = store.get(key)
                store.split(key, cur.session_id, f"s{n}", cur.generation)
            elif mode == "read":
                b = store.get(key)
                store.session(b.session_id)
                store.generation(key)
                store.digest()
            elif mode == "iter":
                it = store.bindings()
                next(it)
                for _ in store.log(1):
                    pass
                for _ in store.history(key):
                    pass
                if n % 2:
                    it.close()
                store.bind(key, f"i{n}")
            elif mode == "follow":
                for _ in store.follow(1, timeout=0):
                    pass
                store.bind(key, f"f{n}")
            else:
                raise SystemExit(f"unknown mode {mode}")
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        store.close()
    print("closed", flush=True)
    return 0


# ---- the parent -------------------------------------------------------------------


def one_try(mode: str, root: str, timeout: float, rng: random.Random) -> str:
    bindlog = _import_bindlog()
    d = tempfile.mkdtemp(prefix=f"sigint-{mode}-", dir=root)
    path = os.path.join(d, "store")
    try:
        p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", mode, path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
        )
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "busy":
            p.kill()
            _out, err = p.communicate()
            return "bad-exit: never busy: " + err[-400:]
        time.sleep(rng.uniform(0.0, 0.25))
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # make the hang actionable: the C stacks (gdb), then the Python stacks
            if shutil.which("gdb"):
                bt = subprocess.run(["gdb", "-p", str(p.pid), "-batch", "-ex", "thread apply all bt"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True, check=False)
                sys.stderr.write(f"--- {mode} hang, pid {p.pid}: C stacks ---\n{bt.stdout}\n")
            p.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            p.kill()
            _out, err = p.communicate()
            sys.stderr.write(f"--- {mode} hang, pid {p.pid}: Python stacks ---\n{err}\n")
            verdict = "hang"
        else:
            verdict = "ok" if "closed" in out and p.returncode == 0 else (
                f"bad-exit: rc {p.returncode}: " + err[-400:])
        with bindlog.Store(path, durability="none") as s:
            rep = s.check()
        if not rep.ok:
            return f"bad-check: {rep.message}" if verdict == "ok" else verdict + "; bad-check"
        return verdict
    finally:
        shutil.rmtree(d, True)


def main(argv: list) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=40, help="tries per mode (default 40)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds before a child counts as hung")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2, help="tries run at once (default 2)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    root = tempfile.mkdtemp(prefix="bindlog-sigint-", dir=os.environ.get("BINDLOG_TEST_TMPDIR"))
    bad = 0
    try:
        for mode in args.modes.split(","):
            counts = {"hang": 0, "bad-exit": 0, "bad-check": 0}
            notes = []
            rngs = [random.Random(seed * 1000 + i) for i in range(args.tries)]
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max(1, args.jobs)) as pool:
                verdicts = list(pool.map(lambda r: one_try(mode, root, args.timeout, r), rngs))
            for v in verdicts:
                for k in counts:
                    if v.startswith(k) or f"; {k}" in v:
                        counts[k] += 1
                if v != "ok":
                    notes.append(v)
            bad += sum(counts.values())
            print(f"{mode}: {args.tries} tries, {counts['hang']} hang, {counts['bad-exit']} bad-exit, "
                  f"{counts['bad-check']} bad-check", flush=True)
            for n in notes[:3]:
                print("   " + n.replace("\n", "\n   "), flush=True)
    finally:
        shutil.rmtree(root, True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
