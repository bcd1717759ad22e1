#!/usr/bin/env python3
"""Run the bindlog Python tests (unittest discovery in this directory).

    python3 run.py [-q] [pattern ...]

Prints unittest's verbose report, then a plain closing line
``N passed, N failed`` (skips are reported on the line before it), and exits
1 if any test failed or errored, or if no test ran.  Patterns select tests
by name, like ``unittest -k``.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import unittest


def main(argv: list) -> int:
    faulthandler.enable()  # a crash inside libbindlog prints every thread's stack
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    verbosity = 2
    patterns = []
    for a in argv:
        if a == "-q":
            verbosity = 1
        else:
            patterns.append(a if "*" in a else f"*{a}*")
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = patterns
    suite = loader.discover(start_dir=here, pattern="test_*.py", top_level_dir=here)
    result = unittest.TextTestRunner(verbosity=verbosity, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped - len(result.expectedFailures)
    sys.stdout.write(f"{skipped} skipped\n")
    sys.stdout.write(f"{passed} passed, {failed} failed\n")
    sys.stdout.flush()
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
