#!/usr/bin/env python3
"""mypy --strict on the bindlog package (ctest: python_mypy).

    python3 mypy_check.py

Checks bindings/python/bindlog as the oldest Python the package supports
(3.8) and as the running one would.  mypy is found on PATH, or as a module
of the running Python.  When it is missing the check is skipped (exit 77,
which ctest reports as skipped) with a message saying so, unless
BINDLOG_REQUIRE_MYPY=1 (CI sets it): then that is a failure.  Ends with a
plain "N passed, N failed" line.  mypy's cache goes to a temporary
directory, never into the checkout.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(HERE), "bindlog")
SKIP = 77


def mypy_command() -> Optional[List[str]]:
    exe = shutil.which("mypy")
    if exe:
        return [exe]
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    return None


def main() -> int:
    cmd = mypy_command()
    if cmd is None:
        require = os.environ.get("BINDLOG_REQUIRE_MYPY") == "1"
        print("mypy is not installed (Debian: apt-get install mypy; scripts/deps.sh lists it): "
              + ("BINDLOG_REQUIRE_MYPY=1, so this is a failure" if require
                 else "the type check is skipped (BINDLOG_REQUIRE_MYPY=1 makes that a failure)"))
        if require:
            print("0 passed, 1 failed")
            return 1
        return SKIP
    version = subprocess.run(cmd + ["--version"], stdout=subprocess.PIPE, universal_newlines=True)
    print(version.stdout.strip())
    passed = failed = 0
    for target in ("3.8", f"{sys.version_info[0]}.{sys.version_info[1]}"):
        cache = tempfile.mkdtemp(prefix="bindlog-mypy-")
        try:
            args = cmd + ["--strict", "--cache-dir", cache, "--python-version", target, PACKAGE]
            print("$ " + " ".join(args[len(cmd):]))
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        sys.stdout.write(p.stdout)
        if p.returncode == 0:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
