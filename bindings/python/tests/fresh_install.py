#!/usr/bin/env python3
"""Issue 12's "done when": the Python package from a fresh copy of the repository.

    python3 fresh_install.py [--keep] [--base-python /usr/bin/python3]

ctest runs it as python_fresh_install, and .ci/run in a section of its own
(setting BINDLOG_FRESH_INSTALL_SEPARATELY=1 for ctest, which then skips it:
exit 77).  In a temporary directory:

 1. a fresh clone of this checkout (committed state, plus the working
    tree's uncommitted changes to tracked and new files, committed in the
    clone), with no CMake build anywhere in it;
 2. BASE -m venv --system-site-packages v            (Debian's Python: its
    setuptools and wheel come from python3-setuptools and python3-wheel)
    v/bin/pip install --no-build-isolation ./bindings/python
    which compiles libbindlog into the package;
 3. the installed library's NEEDED list: liblmdb, libxxhash and libc only
    (no libcurl, no json-c: the package's library has no etcd backend);
 4. v/bin/python runs the whole Python suite against the installed package
    (BINDLOG_TEST_INSTALLED=1: the seed scenarios through AsyncStore among
    them), with neither BINDLOG_LIBRARY nor PYTHONPATH;
 5. v/bin/pip wheel gives one platform-tagged wheel holding exactly one
    libbindlog.so; an sdist built from the clone builds a wheel too; the
    sdist carries LMDB's and xxHash's sources with their licences
    (scripts/vendor-sources.sh, fetched outside the clone) and the library
    built from it has no liblmdb or libxxhash in its NEEDED list;
 6. after each step, `git status --porcelain --ignored` in the clone is
    empty: the builds left nothing in the checkout;
 7. the CLI in the package: `v/bin/bindlog --version` names the package's
    version, `bindlog --help` and `python -m bindlog --help` run, and
    `bindlog check` passes on a store the package wrote;
 8. the wheel is tagged py3-none-<platform>, its library and CLI carry no
    debug sections, and it installs and works in a venv of every other
    CPython 3 found (/usr/bin, /usr/local/bin; a clear skip when none).

Prints each command with its output's gist (the install transcript), then
a closing "N passed, N failed" line; exits 1 if any check failed.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
#: what the package's library may link with (anything else fails the check)
ALLOWED_NEEDED = re.compile(r"^(liblmdb\.so|libxxhash\.so|libc\.so|ld-linux[-\w.]*\.so|libpthread\.so)")
FORBIDDEN_NEEDED = re.compile(r"curl|json-c|ssl|crypto|gssapi|ldap|krb5")


class Run:
    def __init__(self, work: str) -> None:
        self.work = work
        self.passed = 0
        self.failed: List[str] = []
        # what the user's shell would have: no hint towards a built library
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("BINDLOG_LIBRARY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
                                 "BINDLOG_TEST_INSTALLED")}
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        self.env["PIP_NO_CACHE_DIR"] = "1"  # nothing left in ~/.cache/pip either
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"

    def sh(self, args: Sequence[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
           show: int = 12) -> "subprocess.CompletedProcess[str]":
        where = os.path.relpath(cwd or self.work, self.work)
        print(f"\n[{where}]$ {' '.join(args)}", flush=True)
        t0 = time.monotonic()
        p = subprocess.run(list(args), cwd=cwd or self.work, env=env or self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        lines = p.stdout.rstrip("\n").splitlines()
        for line in (lines if p.returncode != 0 else lines[-show:]):
            print("    " + line)
        print(f"    (exit {p.returncode}, {time.monotonic() - t0:.1f} s)", flush=True)
        return p

    def check(self, ok: bool, what: str) -> bool:
        print(("ok:   " if ok else "FAIL: ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
        return ok


def fresh_clone(run: Run, dest: str) -> None:
    """Clone the checkout and bring the working tree's changes along."""
    p = run.sh(["git", "clone", "-q", REPO, dest])
    if p.returncode != 0:
        raise SystemExit(f"cannot clone {REPO}: is it a git checkout?")
    ls = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        stdout=subprocess.PIPE, check=True).stdout.decode("utf-8", "surrogateescape")
    changed = 0
    for rel in filter(None, ls.split("\0")):
        src, dst = os.path.join(REPO, rel), os.path.join(dest, rel)
        if not os.path.lexists(src):
            if os.path.lexists(dst):
                os.remove(dst)
                changed += 1
            continue
        if os.path.isfile(dst) and not os.path.islink(src) and _same(src, dst):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        changed += 1
    if changed:
        print(f"    (copied {changed} uncommitted file(s) from the working tree)")
        git = ["git", "-C", dest, "-c", "user.name=fresh-install", "-c", "user.email=fresh@install.invalid"]
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", "the working tree's uncommitted changes"], check=True)


def _same(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def clean(run: Run, clone: str, after: str) -> None:
    st = subprocess.run(["git", "-C", clone, "status", "--porcelain", "--ignored"],
                        stdout=subprocess.PIPE, universal_newlines=True).stdout
    run.check(st == "", f"the checkout is as it was after {after}" + (f": {st.split()}" if st else ""))


def needed(run: Run, lib: str) -> List[str]:
    readelf = shutil.which("readelf")
    if readelf is None:
        run.check(False, "readelf (binutils) is there to read the library's NEEDED list")
        return []
    out = subprocess.run([readelf, "-d", lib], stdout=subprocess.PIPE, universal_newlines=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable, help="the Python to make the venv from (default /usr/bin/python3)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args(argv)
    if os.environ.get("BINDLOG_FRESH_INSTALL_SEPARATELY") == "1":
        # .ci/run runs this script in a section of its own, with its transcript
        print("BINDLOG_FRESH_INSTALL_SEPARATELY=1: the fresh install runs on its own (.ci/run); skipped here")
        return 77
    if shutil.which("git") is None:
        print("git is not installed: cannot make a fresh clone")
        print("0 passed, 1 failed")
        return 1
    work = tempfile.mkdtemp(prefix="bindlog-fresh-install-")
    run = Run(work)
    print(f"fresh install of the Python package from {REPO} in {work}")
    try:
        clone = os.path.join(work, "bindlog")
        fresh_clone(run, clone)
        run.check(not glob.glob(os.path.join(clone, "build*")), "no CMake build in the fresh clone")
        clean(run, clone, "the clone")

        venv = os.path.join(work, "v")
        p = run.sh([a.base_python, "-m", "venv", "--system-site-packages", venv])
        if not run.check(p.returncode == 0, f"{a.base_python} -m venv --system-site-packages v"):
            return report(run)
        py, pip = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "pip")
        run.sh([py, "-c", "import setuptools, sys; print('python', sys.version.split()[0], "
                "'setuptools', setuptools.__version__); import wheel; print('wheel', wheel.__version__)"])

        p = run.sh([pip, "install", "--no-build-isolation", "./bindings/python"], cwd=clone, show=4)
        if not run.check(p.returncode == 0, "v/bin/pip install --no-build-isolation ./bindings/python"):
            return report(run)
        clean(run, clone, "pip install")

        p = run.sh([py, "-c", "import bindlog; print(bindlog.load_library()); print(bindlog.__file__)"],
                   cwd=work)
        lib = p.stdout.splitlines()[0] if p.returncode == 0 and p.stdout else ""
        run.check(lib.startswith(venv + os.sep) and lib.endswith(os.path.join("bindlog", "libbindlog.so")),
                  f"the package loads its own library ({lib})")
        if lib:
            deps = needed(run, lib)
            print(f"    NEEDED: {', '.join(deps)}")
            run.check(bool(deps) and all(ALLOWED_NEEDED.match(d) for d in deps)
                      and not any(FORBIDDEN_NEEDED.search(d) for d in deps),
                      "the library links liblmdb, libxxhash and libc only (no libcurl, no json-c)")

        check_cli(run, venv, work)

        env = dict(run.env, BINDLOG_TEST_INSTALLED="1", TMPDIR=work)
        p = run.sh([py, os.path.join(clone, "bindings", "python", "tests", "run.py"), "-q"], cwd=work,
                   env=env, show=6)
        run.check(p.returncode == 0, "the Python suite passes against the installed package "
                  "(seed scenarios through AsyncStore included)")
        clean(run, clone, "the tests")

        wheels = os.path.join(work, "wheels")
        p = run.sh([pip, "wheel", "--no-build-isolation", "--no-deps", "-w", wheels, "./bindings/python"],
                   cwd=clone, show=3)
        run.check(p.returncode == 0, "v/bin/pip wheel")
        check_wheels(run, glob.glob(os.path.join(wheels, "*.whl")))
        clean(run, clone, "pip wheel")
        other_pythons(run, a.base_python, glob.glob(os.path.join(wheels, "*.whl")), work)

        sdists = os.path.join(work, "sdist")
        # LMDB's and xxHash's sources for the sdist, fetched outside the clone
        p = run.sh([py, "setup.py", "-q", "sdist", "-d", sdists], cwd=os.path.join(clone, "bindings", "python"),
                   env=dict(run.env, BINDLOG_VENDOR_DIR=os.path.join(work, "vendor")), show=2)
        tars = glob.glob(os.path.join(sdists, "*.tar.gz"))
        run.check(p.returncode == 0 and len(tars) == 1, "an sdist")
        clean(run, clone, "the sdist")
        if tars:
            p = run.sh([pip, "wheel", "--no-build-isolation", "--no-deps", "-w",
                        os.path.join(work, "wheels-from-sdist"), tars[0]], show=3)
            run.check(p.returncode == 0, "pip wheel builds the sdist (it carries the C sources)")
            from_sdist = glob.glob(os.path.join(work, "wheels-from-sdist", "*.whl"))
            check_wheels(run, from_sdist)
            check_bundled(run, tars[0], from_sdist, work)
        return report(run)
    finally:
        if a.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def check_wheels(run: Run, wheels: List[str]) -> None:
    if not run.check(len(wheels) == 1, f"one wheel ({[os.path.basename(w) for w in wheels]})"):
        return
    name = os.path.basename(wheels[0])
    tag = "-".join(name[:-4].split("-")[-3:])
    print(f"    wheel tag: {tag}")
    run.check(tag.startswith("py3-none-") and ("linux" in tag or "macosx" in tag),
              f"the wheel is tagged py3-none-<platform>, for every CPython 3 ({tag})")
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
    libs = [n for n in names if os.path.basename(n).startswith("libbindlog")]
    run.check(libs == ["bindlog/libbindlog.so"], f"exactly one copy of the library in the wheel ({libs})")
    run.check(not any(n.startswith("csrc/") or n.endswith((".c", ".h")) for n in names),
              "no C sources in the wheel")
    run.check("bindlog/bin/bindlog" in names, "the CLI is in the wheel (bindlog/bin/bindlog)")
    readelf = shutil.which("readelf")
    if readelf is None:
        return
    tmp = tempfile.mkdtemp()
    try:
        with zipfile.ZipFile(wheels[0]) as z:
            for n in ("bindlog/libbindlog.so", "bindlog/bin/bindlog"):
                if n not in names:
                    continue
                path = z.extract(n, tmp)
                secs = subprocess.run([readelf, "-S", "-W", path], stdout=subprocess.PIPE,
                                      universal_newlines=True).stdout
                size = os.path.getsize(path)
                run.check(".debug_info" not in secs, f"{n} carries no debug sections ({size} bytes)")
    finally:
        shutil.rmtree(tmp, True)


def package_version(py: str) -> str:
    return subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('bindlog'))"],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()


def check_cli(run: Run, venv: str, work: str) -> None:
    """The CLI in the package: on PATH in the venv and as python -m bindlog."""
    py, exe = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "bindlog")
    version = package_version(py)
    p = run.sh([exe, "--version"])
    run.check(p.returncode == 0 and p.stdout.startswith(f"bindlog {version} "),
              f"v/bin/bindlog --version names the package's version {version} ({p.stdout.strip()})")
    p = run.sh([exe, "--help"], show=3)
    run.check(p.returncode == 0 and "usage: bindlog" in p.stdout, "v/bin/bindlog --help")
    p = run.sh([py, "-m", "bindlog", "--help"], show=3)
    run.check(p.returncode == 0 and "usage: bindlog" in p.stdout, "v/bin/python -m bindlog --help")
    store = os.path.join(work, "cli-store")
    p = run.sh([py, "-c", "import bindlog, sys\nwith bindlog.Store(sys.argv[1]) as s:\n"
                "    s.bind('k', 'A'); s.split('k', 'A', 'B', 1)", store])
    p = run.sh([exe, "-d", store, "check"], show=4)
    run.check(p.returncode == 0, "v/bin/bindlog -d STORE check passes on a store the package wrote")


def other_pythons(run: Run, base: str, wheels: List[str], work: str) -> None:
    """Install the wheel into a venv of each other CPython 3 found."""
    if len(wheels) != 1:
        return
    base_ver = subprocess.run([base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    found: Dict[str, str] = {}
    for d in ("/usr/bin", "/usr/local/bin"):
        for exe in sorted(glob.glob(os.path.join(d, "python3.*"))):
            m = re.match(r"^python(3\.\d+)$", os.path.basename(exe))
            if m and m.group(1) != base_ver and m.group(1) not in found and os.access(exe, os.X_OK):
                found[m.group(1)] = exe
    if not found:
        print(f"    SKIP: no CPython 3 other than {base_ver} in /usr/bin or /usr/local/bin: the wheel's "
              "install under a second Python is not tested here")
        return
    for ver, exe in sorted(found.items()):
        venv = os.path.join(work, f"v{ver}")
        p = run.sh([exe, "-m", "venv", venv])
        if not run.check(p.returncode == 0, f"{exe} -m venv"):
            continue
        py = os.path.join(venv, "bin", "python")
        p = run.sh([py, "-m", "pip", "install", "--no-deps", wheels[0]], show=2)
        run.check(p.returncode == 0, f"the wheel installs under Python {ver}")
        p = run.sh([py, "-c", "import bindlog, sys, tempfile, os\nd = tempfile.mkdtemp()\n"
                    "with bindlog.Store(os.path.join(d, 's')) as s:\n    print(s.bind('k', 'A').outcome.name)"])
        run.check(p.returncode == 0 and "APPLIED" in p.stdout, f"the wheel works under Python {ver}")


def check_bundled(run: Run, sdist: str, wheels: List[str], work: str) -> None:
    """The sdist carries LMDB's and xxHash's sources with their licences, and
    the library built from it needs only libc (no liblmdb, no libxxhash)."""
    import tarfile
    with tarfile.open(sdist) as t:
        names = t.getnames()
    for f in ("lmdb/mdb.c", "lmdb/midl.c", "lmdb/LICENSE", "lmdb/COPYRIGHT", "xxhash/xxhash.c",
              "xxhash/xxhash.h", "xxhash/LICENSE"):
        run.check(any(n.endswith("/csrc/deps/" + f) for n in names), f"the sdist carries csrc/deps/{f}")
    if len(wheels) != 1:
        return
    with zipfile.ZipFile(wheels[0]) as z:
        lib = z.extract("bindlog/libbindlog.so", os.path.join(work, "bundled"))
    deps = needed(run, lib)
    print(f"    NEEDED (built from the sdist, LMDB and xxHash bundled): {', '.join(deps)}")
    run.check(bool(deps) and not any(re.search(r"lmdb|xxhash", d) for d in deps)
              and all(ALLOWED_NEEDED.match(d) for d in deps),
              "the library built from the sdist needs only libc (no liblmdb, no libxxhash)")


def report(run: Run) -> int:
    for what in run.failed:
        print(f"failed: {what}")
    print(f"{run.passed} passed, {len(run.failed)} failed")
    return 0 if not run.failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
