#!/usr/bin/env python3
"""versions.py -- every place that states bindlog's version states the same one (ctest: versions).

    python3 tests/docs/versions.py --repo DIR [--cli build/tools/bindlog]

The library version lives in include/bindlog.h (BINDLOG_VERSION_STRING); the
CMake project, the npm package, the Python package (pyproject.toml and
bindlog.__version__), the man pages, `bindlog --version` and CHANGELOG.md
(a heading for that version, or an [Unreleased] section above the last
release's heading) must agree with it.  Ends with the plain "N passed, N
failed" line; exit 1 on any disagreement.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Optional


def grab(path: str, pattern: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            m = re.search(pattern, f.read(), re.M | re.S)
    except OSError:
        return None
    return m.group(1) if m else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--cli")
    a = ap.parse_args()
    r = lambda *p: os.path.join(a.repo, *p)  # noqa: E731

    want = grab(r("include", "bindlog.h"), r'^#define BINDLOG_VERSION_STRING "([^"]+)"')
    print(f"include/bindlog.h: {want}")
    seen = {
        "CMakeLists.txt project()": grab(r("CMakeLists.txt"), r"^project\(bindlog\s+VERSION\s+([0-9.]+)"),
        "bindings/python/pyproject.toml": grab(r("bindings", "python", "pyproject.toml"), r'^version = "([^"]+)"'),
        "bindings/python/bindlog/__init__.py": grab(r("bindings", "python", "bindlog", "__init__.py"),
                                                    r'^__version__ = "([^"]+)"'),
        "docs/man/bindlog.1": grab(r("docs", "man", "bindlog.1"), r'^\.TH\s+\S+\s+1\s+"[^"]*"\s+"bindlog ([^"]+)"'),
        "docs/man/bindlog.3": grab(r("docs", "man", "bindlog.3"), r'^\.TH\s+\S+\s+3\s+"[^"]*"\s+"bindlog ([^"]+)"'),
    }
    try:
        with open(r("bindings", "node", "package.json"), encoding="utf-8") as f:
            seen["bindings/node/package.json"] = json.load(f).get("version")
    except (OSError, ValueError):
        seen["bindings/node/package.json"] = None
    if a.cli:
        out = subprocess.run([a.cli, "--version"], stdout=subprocess.PIPE, universal_newlines=True).stdout
        m = re.match(r"bindlog (\S+)", out)
        seen["bindlog --version"] = m.group(1) if m else None

    passed = failed = 0
    for where, got in seen.items():
        ok = want is not None and got == want
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {where}: {got}")

    heads = re.findall(r"^## \[([^\]]+)\]", open(r("CHANGELOG.md"), encoding="utf-8").read(), re.M)
    released = [h for h in heads if h != "Unreleased"]
    ok = bool(released) and released[0] == want and (not heads or heads[0] in ("Unreleased", want))
    passed += ok
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'}  CHANGELOG.md: newest release {released[0] if released else None}"
          f"{' under [Unreleased]' if heads and heads[0] == 'Unreleased' else ''}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
