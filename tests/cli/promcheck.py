#!/usr/bin/env python3
"""promcheck.py -- a strict checker of Prometheus' text exposition format.

    bindlog stat --prometheus | python3 tests/cli/promcheck.py [--prefix bindlog_]

Checks the text format (version 0.0.4) as Prometheus documents it, and the
conventions bindlog promises on top (docs/tools.md, "stat --prometheus"):

  - every line is a comment ("# HELP", "# TYPE" or another "# ..."), a
    sample, or empty; the text ends with a newline;
  - HELP and TYPE name a valid metric name, at most once each per family,
    before the family's first sample; TYPE is counter, gauge, histogram,
    summary or untyped;
  - a sample is NAME[{LABEL="VALUE",...}] VALUE [TIMESTAMP]: valid metric
    and label names (no leading "__"), label values in double quotes with
    only \\\\, \\" and \\n escaped, no label twice, a float value (or NaN,
    +Inf, -Inf), an integer timestamp;
  - a family's samples are contiguous and no (name, labels) repeats;
  - bindlog's own rules: every family has HELP and TYPE, every name starts
    with the prefix, counters end in "_total" and hold non-negative
    integers, gauges are finite.

Prints "ok: N families, M samples" and exits 0, or prints each problem with
its line number and exits 1.
"""
import math
import re
import sys

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
FLOAT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_labels(s, i, lineno, problems):
    """Parse {a="b",...} starting at s[i] == '{'; return (labels, next index)."""
    labels = {}
    i += 1
    while True:
        if i < len(s) and s[i] == "}":
            return labels, i + 1
        m = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*").match(s, i)
        if not m:
            problems.append(f"line {lineno}: expected a label name at column {i + 1}")
            return None, i
        name = m.group(0)
        if name.startswith("__"):
            problems.append(f"line {lineno}: label name {name!r} is reserved (starts with __)")
        i = m.end()
        if s[i:i + 2] != '="':
            problems.append(f"line {lineno}: expected '=\"' after label {name!r}")
            return None, i
        i += 2
        value = []
        while True:
            if i >= len(s):
                problems.append(f"line {lineno}: unterminated label value")
                return None, i
            c = s[i]
            if c == "\\":
                if i + 1 >= len(s) or s[i + 1] not in '\\"n':
                    problems.append(f"line {lineno}: invalid escape in a label value")
                    return None, i
                value.append({"n": "\n"}.get(s[i + 1], s[i + 1]))
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                problems.append(f"line {lineno}: raw newline in a label value")
                return None, i
            else:
                value.append(c)
                i += 1
        if name in labels:
            problems.append(f"line {lineno}: label {name!r} given twice")
        labels[name] = "".join(value)
        if i < len(s) and s[i] == ",":
            i += 1
        elif i < len(s) and s[i] == "}":
            continue
        else:
            problems.append(f"line {lineno}: expected ',' or '}}' after a label value")
            return None, i


def parse_value(v):
    if v in ("NaN", "+Inf", "-Inf"):
        return float(v.replace("Inf", "inf").replace("NaN", "nan"))
    if not FLOAT.match(v):
        return None
    return float(v)


def check(text, prefix):
    problems = []
    if text and not text.endswith("\n"):
        problems.append("the text does not end with a newline")
    help_of, type_of = {}, {}
    seen_samples = set()
    family_order = []      # families in the order their samples appear
    closed = set()         # families whose samples ended (another began)
    current = None
    nsamples = 0
    for lineno, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else
                                  text.split("\n"), 1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not METRIC.match(parts[2]):
                    problems.append(f"line {lineno}: {parts[1]} without a valid metric name")
                    continue
                name = parts[2]
                table = help_of if parts[1] == "HELP" else type_of
                if name in table:
                    problems.append(f"line {lineno}: second {parts[1]} for {name}")
                if name in family_order:
                    problems.append(f"line {lineno}: {parts[1]} for {name} after its samples")
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "TYPE" and rest not in TYPES:
                    problems.append(f"line {lineno}: unknown type {rest!r} for {name}")
                if parts[1] == "HELP":
                    if re.search(r"\\(?![\\n])", rest):
                        problems.append(f"line {lineno}: invalid escape in HELP text")
                table[name] = rest
            continue
        m = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*").match(line)
        if not m:
            problems.append(f"line {lineno}: not a sample, a comment or empty: {line!r}")
            continue
        name = m.group(0)
        i = m.end()
        labels = {}
        if i < len(line) and line[i] == "{":
            labels, i = parse_labels(line, i, lineno, problems)
            if labels is None:
                continue
        if i >= len(line) or line[i] != " ":
            problems.append(f"line {lineno}: expected a space before the value")
            continue
        fields = line[i + 1:].split(" ")
        if len(fields) not in (1, 2) or parse_value(fields[0]) is None:
            problems.append(f"line {lineno}: bad value {line[i + 1:]!r}")
            continue
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            problems.append(f"line {lineno}: bad timestamp {fields[1]!r}")
        value = parse_value(fields[0])
        nsamples += 1
        family = name
        if family != current:
            if family in closed or family in family_order:
                problems.append(f"line {lineno}: samples of {family} are not contiguous")
            if current is not None:
                closed.add(current)
            current = family
            family_order.append(family)
        key = (name, tuple(sorted(labels.items())))
        if key in seen_samples:
            problems.append(f"line {lineno}: sample {name}{labels} repeated")
        seen_samples.add(key)
        # bindlog's conventions
        if not name.startswith(prefix):
            problems.append(f"line {lineno}: {name} lacks the prefix {prefix!r}")
        if family not in help_of or family not in type_of:
            problems.append(f"line {lineno}: {family} has no HELP or no TYPE before it")
        kind = type_of.get(family)
        if kind == "counter":
            if not name.endswith("_total"):
                problems.append(f"line {lineno}: counter {name} does not end in _total")
            if not (value >= 0 and value == int(value)):
                problems.append(f"line {lineno}: counter {name} is not a whole number >= 0")
        if kind == "gauge" and (math.isnan(value) or math.isinf(value)):
            problems.append(f"line {lineno}: gauge {name} is not finite")
    for name in list(help_of) + list(type_of):
        if name not in family_order:
            problems.append(f"{name} has HELP or TYPE but no sample")
    return problems, len(family_order), nsamples


def main():
    prefix = "bindlog_"
    if len(sys.argv) == 3 and sys.argv[1] == "--prefix":
        prefix = sys.argv[2]
    text = sys.stdin.read()
    problems, nfam, nsamples = check(text, prefix)
    if problems:
        for p in problems:
            print(p)
        return 1
    print(f"ok: {nfam} families, {nsamples} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
