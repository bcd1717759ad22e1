"""The ctypes structs in bindlog/_ffi.py must match include/bindlog.h.

Two independent checks:
  * the header text: every public struct with a body is declared in _ffi,
    with the same fields in the same order;
  * the compiler: layout_probe (built by CMake from layout_probe.c, path in
    BINDLOG_LAYOUT_PROBE) prints sizeof/alignof/offsetof of every struct and
    field, compared with ctypes.sizeof/alignment/offsets.  When the probe
    was not built but a C compiler is at hand, the test builds it itself.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from typing import Dict, List, Optional, Tuple

from support import HEADER, HERE

from bindlog import _ffi


def header_structs(text: str) -> Dict[str, List[str]]:
    """{struct name: [field names in order]} for every typedef'd struct with a body."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out: Dict[str, List[str]] = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        name, body, alias = m.group(1), m.group(2), m.group(3)
        assert name == alias, (name, alias)
        fields: List[str] = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)  # function pointer
            if fp:
                fields.append(fp.group(1))
                continue
            decl = re.sub(r"\[[^\]]*\]", "", decl)  # array bounds
            first, *rest = decl.split(",")
            fields.append(first.split()[-1].lstrip("*"))
            fields.extend(r.strip().lstrip("*") for r in rest)
        out[name] = fields
    return out


def ctypes_offsets(cls: type) -> List[Tuple[str, int, int]]:
    return [(f, getattr(cls, f).offset, getattr(cls, f).size) for f, _ in cls._fields_]


def run_probe() -> Optional[str]:
    exe = os.environ.get("BINDLOG_LAYOUT_PROBE")
    if exe and os.path.exists(exe):
        return subprocess.run([exe], check=True, capture_output=True, text=True,
                              timeout=60).stdout
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc or not os.path.exists(HEADER):
        return None
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "probe")
        subprocess.run([cc, "-std=c11", "-I", os.path.dirname(HEADER), "-o", out,
                        os.path.join(HERE, "layout_probe.c")], check=True, timeout=120)
        return subprocess.run([out], check=True, capture_output=True, text=True,
                              timeout=60).stdout


class HeaderText(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(HEADER), f"no header at {HEADER}")
    def test_fields_in_header_order(self) -> None:
        with open(HEADER, encoding="utf-8") as f:
            structs = header_structs(f.read())
        self.assertGreaterEqual(len(structs), 8)
        for name, fields in structs.items():
            with self.subTest(struct=name):
                self.assertIn(name, _ffi.STRUCTS, f"{name} is not declared in bindlog/_ffi.py")
                self.assertEqual([f for f, _ in _ffi.STRUCTS[name]._fields_], fields)
        self.assertEqual(set(_ffi.STRUCTS), set(structs))

    @unittest.skipUnless(os.path.exists(HEADER), f"no header at {HEADER}")
    def test_constants_match_the_header(self) -> None:
        with open(HEADER, encoding="utf-8") as f:
            text = f.read()
        defines = dict(re.findall(r"#define\s+BINDLOG_(\w+)\s+(-?\d+)\b", text))
        checked = 0
        for name, value in defines.items():
            if hasattr(_ffi, name):
                self.assertEqual(getattr(_ffi, name), int(value), name)
                checked += 1
        self.assertGreaterEqual(checked, 30)
        self.assertIn("UINT64_MAX", re.search(r"#define\s+BINDLOG_ANY_GENERATION\s+(\S+)", text).group(1))


class CompilerLayout(unittest.TestCase):
    def test_sizes_and_offsets_match_c(self) -> None:
        try:
            out = run_probe()
        except (OSError, subprocess.CalledProcessError) as exc:
            self.fail(f"layout probe failed: {exc}")
        if out is None:
            self.skipTest("no layout_probe (BINDLOG_LAYOUT_PROBE) and no C compiler")
        c_structs: Dict[str, Tuple[int, int]] = {}
        c_fields: Dict[str, List[Tuple[str, int, int]]] = {}
        for line in out.splitlines():
            kind, name, *nums = line.split()
            if kind == "struct":
                c_structs[name] = (int(nums[0]), int(nums[1]))
            else:
                sname, fname = name.split(".")
                c_fields.setdefault(sname, []).append((fname, int(nums[0]), int(nums[1])))
        self.assertEqual(set(c_structs), set(_ffi.STRUCTS))
        for name, cls in _ffi.STRUCTS.items():
            with self.subTest(struct=name):
                self.assertEqual((ctypes.sizeof(cls), ctypes.alignment(cls)), c_structs[name])
                self.assertEqual(ctypes_offsets(cls), c_fields[name])


if __name__ == "__main__":
    unittest.main()
