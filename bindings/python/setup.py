"""Build script of the bindlog Python package: compiles libbindlog into it.

``pip install ./bindings/python`` (offline: add ``--no-build-isolation``)
compiles the library's C sources -- src/core, src/lmdb and src/maint, never
src/etcd -- into ``bindlog/libbindlog.so`` inside the package.  An sdist
carries LMDB's and xxHash's sources (``csrc/deps/``, from Debian's source
packages through scripts/vendor-sources.sh) and always builds them in, so
the library needs only libc; a checkout without them (no ``vendor/``) links
the system's liblmdb and libxxhash (Debian: liblmdb-dev, libxxhash-dev).  The package loads that copy with ctypes; ``BINDLOG_LIBRARY``
still overrides it.  No CMake build is needed first.

Where the C sources come from:
  - an sdist carries them in ``csrc/`` (``include/`` and ``src/{core,lmdb,
    maint}/``), copied there by the sdist command below;
  - a build in a checkout (pip builds local directories in place) takes
    them from the repository, two levels up: ``../../include``, ``../../src``.

Nothing is written into the checkout: setuptools' build directory and its
egg-info go to a temporary directory, removed when the build ends (pip runs
this script once per step, each with its own).  ``BINDLOG_BUILD_JOBS`` sets
how many C files compile at once (default: the number of CPUs, at most 8).

The library is not a Python extension module (no Python.h, no libpython),
but it is declared as an ``Extension`` so that setuptools and wheel treat
the package as platform-specific; the wheel is tagged ``py3-none-<platform>``
(one wheel for every CPython 3), holds exactly one ``libbindlog.so`` and the
``bindlog`` CLI (tools/, in ``bindlog/bin/``), both without debug sections.
"""
from __future__ import annotations

import atexit
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_EXT = "bindlog.libbindlog"  # -> bindlog/libbindlog.so
#: the library's layers compiled into the package (src/etcd is left out: it
#: is the separate etcd module, loaded for etcd:// only when installed, and
#: an etcd:// open is BINDLOG_ENOTSUP without it; src/core/module.h)
LAYERS = ("core", "lmdb", "maint", "platform")
SDIST_CSRC = "csrc"
#: the `bindlog` CLI (tools/, a client of include/bindlog.h only), built
#: into bindlog/bin/bindlog against the package's libbindlog.so
CLI_DIR = "tools"
#: LMDB's and xxHash's sources with their licences (scripts/vendor-sources.sh):
#: csrc/deps/ in an sdist, $BINDLOG_VENDOR_DIR, or vendor/ in a checkout where
#: that script ran
BUNDLED = {"lmdb": ("mdb.c", "midl.c", "lmdb.h", "midl.h", "LICENSE", "COPYRIGHT", "VERSION"),
           "xxhash": ("xxhash.c", "xxhash.h", "LICENSE", "VERSION")}


def c_tree() -> Optional[str]:
    """The directory holding include/bindlog.h and src/: the sdist's csrc/,
    or the repository around this checkout."""
    for root in (os.path.join(HERE, SDIST_CSRC), os.path.normpath(os.path.join(HERE, "..", ".."))):
        if os.path.isfile(os.path.join(root, "include", "bindlog.h")) and all(
            os.path.isdir(os.path.join(root, "src", layer)) for layer in LAYERS
        ):
            return root
    return None


def c_files(root: str) -> List[str]:
    """Every file of the layers we compile (.c and .h), relative to root."""
    out = [os.path.join("include", "bindlog.h")]
    for layer in LAYERS:
        for pattern in ("*.c", "*.h"):
            out += sorted(
                os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "src", layer, pattern))
            )
    return out


def cli_files(root: str) -> List[str]:
    """The CLI's files (tools/*.c, tools/*.h), relative to root; none when
    the tree has no tools/ (the package then ships without the CLI)."""
    return sorted(
        os.path.relpath(p, root)
        for pattern in ("*.c", "*.h")
        for p in glob.glob(os.path.join(root, CLI_DIR, pattern))
    )


def strip_debug(path: str) -> None:
    """Drop the debug sections of a built file (BINDLOG_KEEP_DEBUG=1 keeps
    them): the wheel ships the library and the CLI without their DWARF."""
    if os.environ.get("BINDLOG_KEEP_DEBUG") == "1":
        return
    exe = shutil.which("strip")
    if exe is not None:
        # macOS's strip says -S for what binutils calls --strip-debug
        subprocess.run([exe, "-S" if sys.platform == "darwin" else "--strip-debug", path], check=True)


def bundled(root: str) -> Optional[str]:
    """The folder holding lmdb/ and xxhash/ sources, if this tree has them:
    the library is then built against them (and needs only libc), whatever
    the system has; otherwise against the system's liblmdb and libxxhash."""
    for d in (os.path.join(root, "deps"), os.environ.get("BINDLOG_VENDOR_DIR") or "",
              os.path.join(root, "vendor")):
        if all(os.path.isfile(os.path.join(d, lib, f)) for lib, fs in BUNDLED.items() for f in fs):
            return d
    return None


def pkg_config(modules: Tuple[str, ...]) -> Tuple[List[str], List[str], List[str], List[str]]:
    """(include dirs, library dirs, libraries, other flags) of `modules`
    through pkg-config, or the plain library names when it is missing."""
    names = {"lmdb": "lmdb", "libxxhash": "xxhash"}
    exe = shutil.which("pkg-config")
    if exe is None:
        return [], [], [names[m] for m in modules], []
    missing = [m for m in modules if subprocess.run([exe, "--exists", m]).returncode != 0]
    if missing:
        sys.exit(
            "bindlog: pkg-config does not know %s: install the development packages "
            "(Debian: apt-get install liblmdb-dev libxxhash-dev)" % ", ".join(missing)
        )
    flags = shlex.split(
        subprocess.run([exe, "--cflags", "--libs", *modules], check=True, stdout=subprocess.PIPE,
                       universal_newlines=True).stdout
    )
    inc = [f[2:] for f in flags if f.startswith("-I")]
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l")]
    other = [f for f in flags if f[:2] not in ("-I", "-L", "-l")]
    return inc, libdirs, libs, other


class BuildLibrary(build_ext):
    """Compiles the C sources in parallel and links them into one shared
    library with hidden visibility (only BINDLOG_API names exported)."""

    def get_ext_filename(self, fullname: str) -> str:
        # called with the full name and, by get_ext_fullpath, the last part
        if fullname in (LIB_EXT, LIB_EXT.rpartition(".")[2]):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext: Extension) -> List[str]:
        return []  # no PyInit_*: this is a plain C library loaded by ctypes

    def build_extension(self, ext: Extension) -> None:
        if ext.name != LIB_EXT:
            return super().build_extension(ext)
        root = c_tree()
        if root is None:
            sys.exit(
                "bindlog: the C sources are not there: neither %s nor the repository's "
                "include/ and src/ two levels above it.  Build from a checkout of the "
                "repository or from an sdist (pip older than 21.3 copies a local "
                "directory elsewhere before building: upgrade pip)." % os.path.join(HERE, SDIST_CSRC)
            )
        sources = [os.path.join(root, p) for p in c_files(root) if p.endswith(".c")]
        deps = bundled(root)
        if deps is not None:
            sources += [os.path.join(deps, "lmdb", "mdb.c"), os.path.join(deps, "lmdb", "midl.c"),
                        os.path.join(deps, "xxhash", "xxhash.c")]
            inc, libdirs, libs, other = [os.path.join(deps, "lmdb"), os.path.join(deps, "xxhash")], [], [], []
        else:
            inc, libdirs, libs, other = pkg_config(("lmdb", "libxxhash"))
        cc = self.compiler
        # Only our own include paths: nothing of Python's (no Python.h used).
        cc.set_include_dirs([])
        # No run path into the interpreter's own lib/ (a pyenv Python's
        # LDSHARED carries one): the library needs nothing from there.
        cc.linker_so = [a for a in cc.linker_so if not a.startswith(("-Wl,-rpath", "-Wl,-R"))]
        include_dirs = [os.path.join(root, "include"), os.path.join(root, "src")] + inc
        macros: List[Tuple[str, Optional[str]]] = [
            ("BINDLOG_BUILDING", None),
            ("_POSIX_C_SOURCE", "200809L"),
        ]
        if sys.platform == "darwin":
            macros.append(("_DARWIN_C_SOURCE", "1"))
        cflags = ["-std=c11", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra"] + other
        objdir = os.path.join(self.build_temp, "libbindlog")
        jobs = int(os.environ.get("BINDLOG_BUILD_JOBS") or min(os.cpu_count() or 1, 8))

        def compile_one(src: str) -> List[str]:
            # (the object's path under objdir is the source's full path)
            return cc.compile([src], output_dir=objdir, macros=macros, include_dirs=include_dirs,
                              extra_postargs=cflags, depends=ext.depends)

        with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
            objects = [o for objs in pool.map(compile_one, sources) for o in objs]
        output = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(output), exist_ok=True)
        cc.link_shared_object(
            objects,
            output,
            libraries=libs,
            library_dirs=libdirs,
            # before the -l flags: link only what the library really uses
            extra_preargs=["-pthread"] + ([] if sys.platform == "darwin" else ["-Wl,--as-needed"]),
            extra_postargs=[] if sys.platform == "darwin" else
            ["-Wl,--no-undefined", "-Wl,-z,nodelete", "-Wl,-soname,libbindlog.so"],
            target_lang="c",
        )
        strip_debug(output)
        self.build_cli(root, output, macros[1:], objdir)

    def build_cli(self, root: str, library: str, macros: List[Tuple[str, Optional[str]]], objdir: str) -> None:
        """bindlog/bin/bindlog: the CLI, linked with the library beside it
        (run path $ORIGIN/..).  `bindlog` on PATH and `python -m bindlog`
        run it (bindlog/__main__.py)."""
        sources = [os.path.join(root, p) for p in cli_files(root) if p.endswith(".c")]
        if not sources:
            return
        cc = self.compiler
        objects = cc.compile(sources, output_dir=objdir, macros=macros,
                             include_dirs=[os.path.join(root, "include")],
                             extra_postargs=["-std=c11", "-Wall", "-Wextra"])
        bindir = os.path.join(os.path.dirname(library), "bin")
        os.makedirs(bindir, exist_ok=True)
        cc.link_executable(objects, "bindlog", output_dir=bindir, libraries=["bindlog"],
                           library_dirs=[os.path.dirname(library)],
                           extra_postargs=["-Wl,-rpath,@loader_path/.."] if sys.platform == "darwin"
                           else ["-Wl,-rpath,$ORIGIN/..", "-Wl,--as-needed"],
                           target_lang="c")
        strip_debug(os.path.join(bindir, "bindlog"))


class SdistWithSources(sdist):
    """An sdist that carries the C sources it needs in csrc/."""

    def make_release_tree(self, base_dir: str, files: List[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = c_tree()
        if root is None:
            sys.exit("bindlog: cannot make an sdist: the C sources are not there")
        for rel in c_files(root) + cli_files(root):
            dest = os.path.join(base_dir, SDIST_CSRC, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), dest)
        # LMDB and xxHash go in too, fetched now if the checkout lacks them
        deps = bundled(root)
        script = os.path.join(root, "scripts", "vendor-sources.sh")
        if deps is None and os.path.isfile(script):
            # BINDLOG_VENDOR_DIR: fetch them there instead of the checkout's vendor/
            subprocess.run(["bash", script] + [os.environ[k] for k in ("BINDLOG_VENDOR_DIR",)
                                               if os.environ.get(k)], check=False)
            deps = bundled(root)
        if deps is None:
            sys.exit("bindlog: cannot make an sdist: LMDB's and xxHash's sources are missing "
                     "(run scripts/vendor-sources.sh as root: it needs apt-get source)")
        for lib, names in BUNDLED.items():
            os.makedirs(os.path.join(base_dir, SDIST_CSRC, "deps", lib), exist_ok=True)
            for f in names:
                shutil.copy2(os.path.join(deps, lib, f), os.path.join(base_dir, SDIST_CSRC, "deps", lib, f))


def out_of_tree_options() -> Dict[str, Dict[str, str]]:
    """setuptools' build directory and egg-info, in a temporary directory
    removed at exit, so that a build leaves the checkout as it was.
    ``BINDLOG_PY_BUILD_BASE`` names a directory to use (and keep) instead."""
    base = os.environ.get("BINDLOG_PY_BUILD_BASE")
    if not base:
        base = tempfile.mkdtemp(prefix="bindlog-pybuild-")
        atexit.register(shutil.rmtree, base, True)
    os.makedirs(base, exist_ok=True)
    return {
        "build": {"build_base": os.path.join(base, "build")},
        "egg_info": {"egg_base": base},
    }


def check_wheel_support() -> None:
    """setuptools older than 70.1 builds wheels only with the `wheel`
    package; say so plainly instead of "invalid command 'bdist_wheel'"."""
    if not {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
        return  # (setuptools 65's dist_info runs bdist_wheel too)
    try:
        import wheel  # noqa: F401
    except ImportError:
        try:
            from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        except ImportError:
            sys.exit(
                "bindlog: this Python (%s) has setuptools but not the 'wheel' package, which "
                "pip needs to build the package with --no-build-isolation.  Install it into "
                "this Python: `%s -m pip install wheel` (offline, from Debian's copy: apt-get "
                "install python3-wheel-whl, then `%s -m pip install "
                "/usr/share/python-wheels/wheel-*.whl`), or drop --no-build-isolation where "
                "PyPI is reachable.  See docs/python.md, \"Install\"."
                % (sys.executable, sys.executable, sys.executable)
            )


check_wheel_support()


def wheel_command() -> Dict[str, Any]:
    """bdist_wheel tagged py3-none-<platform>: the library links no
    libpython (it is loaded with ctypes), so one wheel serves every CPython
    3 of the platform."""
    try:
        from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
    except ImportError:
        try:
            from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
        except ImportError:
            return {}

    class PlatformWheel(bdist_wheel):  # type: ignore[misc,valid-type]
        def get_tag(self) -> Tuple[str, str, str]:
            return ("py3", "none", super().get_tag()[2])

    return {"bdist_wheel": PlatformWheel}


setup(
    packages=["bindlog"],
    # libbindlog.so is not package data: build_ext puts the one copy there
    package_data={"bindlog": ["py.typed"]},
    include_package_data=False,
    ext_modules=[Extension(LIB_EXT, sources=[])],
    cmdclass={"build_ext": BuildLibrary, "sdist": SdistWithSources, **wheel_command()},
    options=out_of_tree_options(),
)
