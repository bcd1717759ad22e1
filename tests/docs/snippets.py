#!/usr/bin/env python3
"""snippets.py -- the code in README.md and docs/ compiles and runs (ctest: doc_snippets).

    python3 tests/docs/snippets.py --repo DIR --lib LIBBINDLOG [--node-pkg DIR] [--list]

Every fenced block in C, Python or JavaScript must say what it is, in an HTML
comment (invisible once rendered) on the line just before its fence:

    <!-- snippet: run -->        a complete program: compiled and run
    <!-- snippet: compile -->    a complete program that needs a real
                                 deployment (a gateway's paths, a peer):
                                 compiled (C), byte-compiled (Python) or
                                 syntax-checked (node --check), not run
    <!-- snippet: fragment -->   part of a program, or a signature listing:
                                 not checked

A block with no marker fails the test (so a new snippet cannot slip in
unchecked), and so does a `fragment` that holds a whole C program (`int
main`).  C programs are built with -std=c11 -Wall -Wextra -Werror against
include/ and the library just built; programs run in an empty temporary
directory (a snippet that opens "./store" makes it there), with a time
limit.  Python runs on the package in the tree (PYTHONPATH) and the library
given; JavaScript runs in a project whose node_modules/bindlog is the built
package.  Ends with the plain "N passed, N failed" line; exit 1 on any
failure.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import List, Optional, Tuple

LANGS = {"c": "c", "python": "python", "py": "python", "js": "js", "javascript": "js",
         "mjs": "js"}
MARK = re.compile(r"^<!--\s*snippet:\s*(run|compile|fragment)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([A-Za-z0-9_+-]*)")
TIMEOUT = 120


@dataclass
class Block:
    path: str
    line: int           # of the opening fence, 1-based
    lang: str
    mark: Optional[str]
    text: str

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: str, shown: str) -> List[Block]:
    out: List[Block] = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        if lang in LANGS:
            k = i - 1
            while k >= 0 and lines[k].strip() == "":
                k -= 1
            mm = MARK.match(lines[k].strip()) if k >= 0 else None
            out.append(Block(shown, i + 1, LANGS[lang], mm.group(1) if mm else None,
                             "\n".join(lines[i + 1:j]) + "\n"))
        i = j + 1
    return out


def run(cmd: List[str], cwd: str, env: Optional[dict] = None) -> Tuple[bool, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT} s: {' '.join(cmd)}"
    return p.returncode == 0, p.stdout


def check_c(b: Block, args: argparse.Namespace, tmp: str) -> Tuple[bool, str]:
    src = os.path.join(tmp, "snippet.c")
    with open(src, "w") as f:
        f.write(b.text)
    exe = os.path.join(tmp, "snippet")
    cc = os.environ.get("CC", "cc")
    libdir = os.path.dirname(os.path.abspath(args.lib))
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(args.repo, "include"),
           src, "-o", exe, args.lib, f"-Wl,-rpath,{libdir}"]
    if b.mark == "compile":
        cmd[cmd.index("-o"):cmd.index("-o") + 2] = ["-c", "-o", exe + ".o"]
    ok, out = run(cmd, tmp)
    if not ok or b.mark == "compile":
        return ok, out
    return run([exe], tmp)


def check_python(b: Block, args: argparse.Namespace, tmp: str) -> Tuple[bool, str]:
    if b.mark == "compile":
        try:
            compile(b.text, b.where(), "exec")
            return True, ""
        except SyntaxError as e:
            return False, f"SyntaxError: {e}"
    src = os.path.join(tmp, "snippet.py")
    with open(src, "w") as f:
        f.write(b.text)
    env = dict(os.environ, PYTHONPATH=os.path.join(args.repo, "bindings", "python"),
               BINDLOG_LIBRARY=os.path.abspath(args.lib), PYTHONDONTWRITEBYTECODE="1")
    return run([sys.executable, src], tmp, env)


class Skip(Exception):
    pass


def node_missing(why: str) -> Tuple[bool, str]:
    """Without Node a JavaScript block cannot run: skipped, unless
    BINDLOG_REQUIRE_NODE=1 (CI), where that is a failure."""
    if os.environ.get("BINDLOG_REQUIRE_NODE") == "1":
        return False, why + " (BINDLOG_REQUIRE_NODE=1)"
    raise Skip(why)


def check_js(b: Block, args: argparse.Namespace, tmp: str) -> Tuple[bool, str]:
    esm = re.search(r"^\s*(import|export)\s", b.text, re.M) is not None
    src = os.path.join(tmp, "snippet.mjs" if esm else "snippet.js")
    with open(src, "w") as f:
        f.write(b.text)
    node = shutil.which("node")
    if node is None:
        return node_missing("node is not installed")
    if b.mark == "compile":
        return run([node, "--check", src], tmp)
    if not args.node_pkg or not os.path.exists(os.path.join(args.node_pkg, "build", "Release",
                                                            "bindlog.node")):
        return node_missing(f"the Node package is not built ({args.node_pkg})")
    os.makedirs(os.path.join(tmp, "node_modules"), exist_ok=True)
    os.symlink(os.path.abspath(args.node_pkg), os.path.join(tmp, "node_modules", "bindlog"))
    return run([node, src], tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--lib", required=True, help="libbindlog.so to link and load")
    ap.add_argument("--node-pkg", help="the built npm package (node_modules/bindlog)")
    ap.add_argument("--list", action="store_true", help="list the blocks and their marks")
    args = ap.parse_args()
    args.repo = os.path.abspath(args.repo)
    args.lib = os.path.abspath(args.lib)
    if args.node_pkg:
        args.node_pkg = os.path.abspath(args.node_pkg)

    files = ["README.md"] + sorted("docs/" + n for n in os.listdir(os.path.join(args.repo, "docs"))
                                   if n.endswith(".md"))
    found: List[Block] = []
    for name in files:
        found += blocks(os.path.join(args.repo, name), name)
    if args.list:
        for b in found:
            print(f"{b.where():28} {b.lang:7} {b.mark or '(none)'}")
        return 0

    passed = failed = skipped = 0
    check = {"c": check_c, "python": check_python, "js": check_js}
    for b in found:
        problem = None
        if b.mark is None:
            problem = ("no <!-- snippet: run|compile|fragment --> line before this block: "
                       "say whether it is a program to run, to compile, or a fragment")
        elif b.mark == "fragment" and b.lang == "c" and re.search(r"\bint\s+main\s*\(", b.text):
            problem = "a whole C program marked as a fragment: mark it run or compile"
        if b.mark == "fragment" and problem is None:
            skipped += 1
            continue
        if problem is None:
            tmp = tempfile.mkdtemp(prefix="bindlog-snippet-")
            try:
                ok, out = check[b.lang](b, args, tmp)
            except Skip as why:
                print(f"skip  {b.where()} ({b.lang}): {why}")
                skipped += 1
                continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if not ok:
                problem = f"{b.mark} failed:\n" + "\n".join("    " + l for l in out.splitlines()[-30:])
        if problem is None:
            passed += 1
            print(f"ok    {b.where()} ({b.lang}, {b.mark})")
        else:
            failed += 1
            print(f"FAIL  {b.where()} ({b.lang}): {problem}")
    print(f"({skipped} fragments or skipped blocks not checked)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
