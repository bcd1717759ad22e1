#!/usr/bin/env python3
"""manpage.py -- bindlog(1) says what `bindlog --help` says (ctest: man_pages).

    python3 tests/docs/manpage.py --cli build/tools/bindlog --man docs/man

Checks, and prints one line per check:
  - every command of `bindlog --help` has its entry in bindlog(1), and the
    page describes no command the tool does not have;
  - every option of `bindlog COMMAND --help` (--long and -s forms) appears
    in that command's entry;
  - every global option and environment variable of `bindlog --help`
    appears in the page;
  - the page's version (.TH) is the tool's (`bindlog --version`);
  - bindlog(1) and bindlog(3) format without a warning (groff -ww), when
    groff is installed.
Ends with the plain "N passed, N failed" line; exit 1 on any failure.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

passed = failed = 0


def report(ok: bool, what: str) -> None:
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {what}")
    else:
        failed += 1
        print(f"FAIL  {what}")


def cli(exe: str, *args: str) -> str:
    p = subprocess.run([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=60)
    return p.stdout


def plain(roff: str) -> str:
    """The page's source with font escapes dropped and \\- made -."""
    s = re.sub(r"\\f[BIRP]", "", roff)
    s = s.replace("\\-", "-").replace("\\e", "\\")
    return s


def entries(lines: List[str], commands: List[str]) -> Dict[str, str]:
    """Each command's entry: from the .B/.BI/.BR line that starts with its
    name (after a .TP) to the next such line or section."""
    heads: List[Tuple[int, str]] = []
    for i, line in enumerate(lines):
        if i == 0 or lines[i - 1].strip() != ".TP":
            continue
        m = re.match(r'^\.(?:B|BI|BR)\s+"?([a-z][a-z-]*)', line)
        if m:
            heads.append((i, m.group(1)))
    out: Dict[str, str] = {}
    for n, (i, name) in enumerate(heads):
        end = len(lines)
        for j in range(i + 1, len(lines)):
            if lines[j].startswith((".SH", ".SS")) or any(j == h for h, _ in heads[n + 1:]):
                end = j
                break
        out[name] = out.get(name, "") + "\n".join(lines[i:end]) + "\n"
    return {k: v for k, v in out.items() if k in commands or re.match(r"^[a-z][a-z-]+$", k)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--man", required=True, help="the folder holding bindlog.1 and bindlog.3")
    args = ap.parse_args()

    page1 = os.path.join(args.man, "bindlog.1")
    with open(page1, encoding="utf-8") as f:
        src = plain(f.read())
    lines = src.split("\n")

    top = cli(args.cli, "--help")
    m = re.search(r"^commands:\n(.*?)\n\n", top, re.S | re.M)
    commands = re.findall(r"^  ([a-z][a-z-]*)\s", m.group(1), re.M) if m else []
    report(len(commands) > 5, f"bindlog --help lists {len(commands)} commands")

    found = entries(lines, commands)
    for name in sorted(set(found) - set(commands)):
        if name in ("dump",):   # `dump --log --follow` has an entry of its own
            continue
        report(False, f"bindlog(1) describes '{name}', which bindlog --help does not list")
    for cmd in commands:
        text = found.get(cmd)
        if text is None:
            report(False, f"{cmd}: no entry in bindlog(1)")
            continue
        helptext = cli(args.cli, cmd, "--help")
        opts = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])(?![\w-])", helptext)))
        opts = [o for o in opts if o not in ("--help", "-d")]
        missing = [o for o in opts if not re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", text)]
        report(not missing, f"{cmd}: {len(opts)} options in its entry"
               + (f"; missing {', '.join(missing)}" if missing else ""))

    glob = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)(?![\w-])", top)) - {"--help"}
    env = set(re.findall(r"\b((?:BINDLOG|ETCDCTL)_[A-Z_]+)\b", top))
    missing = sorted(o for o in glob | env if o not in src)
    report(not missing, f"{len(glob)} global options and {len(env)} environment variables"
           + (f"; missing {', '.join(missing)}" if missing else ""))

    version = cli(args.cli, "--version").split()
    tool = version[1] if len(version) > 1 else "?"
    for page in ("bindlog.1", "bindlog.3"):
        path = os.path.join(args.man, page)
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        th = re.search(r'^\.TH\s+\S+\s+[0-9]\s+"[^"]*"\s+"bindlog ([^"]+)"', text, re.M)
        report(th is not None and th.group(1) == tool,
               f"{page}: version {th.group(1) if th else '?'}, the tool's {tool}")

    groff = shutil.which("groff")
    for page in ("bindlog.1", "bindlog.3"):
        path = os.path.join(args.man, page)
        if not os.path.exists(path):
            report(False, f"{page} exists")
            continue
        if groff is None:
            print(f"skip  {page}: groff is not installed (formatting not checked)")
            continue
        p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        report(p.returncode == 0 and p.stdout.strip() == "",
               f"{page} formats without warnings" + (f": {p.stdout.strip()}" if p.stdout.strip() else ""))

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
