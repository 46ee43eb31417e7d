#!/usr/bin/env python3
"""docs/ARCHITECTURE.md's "Where each op lives" names every method of the Backend
(src/backend/backend.h), and names no method the Backend does not have: an op added, renamed or
removed without its row fails here, naming it.

The methods are the `virtual` declarations of backend.h (comments removed, a declaration may
span lines; the destructor is not one), an op's implementation `do_<op>` counting as the op.
The table's names are the backticked identifiers of its first column.

Usage: op_table_test.py [--source DIR]   (default: the repository this file is in)
"""
import argparse
import os
import re
import sys


def backend_methods(header_text):
    text = re.sub(r"//[^\n]*", "", header_text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = set()
    for match in re.finditer(r"\bvirtual\b([^;{]*?)\(", text, flags=re.S):
        name = re.findall(r"~?\w+", match.group(1))[-1]
        if not name.startswith("~"):
            names.add(name[len("do_"):] if name.startswith("do_") else name)
    return names


def table_names(markdown):
    found = re.search(r"^## Where each op lives\n(.*?)(?=^## )", markdown, flags=re.M | re.S)
    if not found:
        sys.exit("FAIL: docs/ARCHITECTURE.md has no section '## Where each op lives'")
    names = set()
    for line in found.group(1).splitlines():
        cells = line.split("|")
        if len(cells) < 4 or set(cells[1].strip()) <= set("-"):
            continue
        names.update(re.findall(r"`(\w+)`", cells[1]))
    return names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    with open(os.path.join(args.source, "src", "backend", "backend.h")) as f:
        methods = backend_methods(f.read())
    with open(os.path.join(args.source, "docs", "ARCHITECTURE.md")) as f:
        listed = table_names(f.read())
    if len(methods) < 20:
        sys.exit("FAIL: found only %d Backend methods in backend.h: %s" %
                 (len(methods), sorted(methods)))
    failures = []
    missing = sorted(methods - listed)
    if missing:
        failures.append("Backend methods missing from docs/ARCHITECTURE.md's \"Where each op "
                        "lives\": " + ", ".join(missing))
    stale = sorted(listed - methods)
    if stale:
        failures.append("names in that table's first column that are not Backend methods: " +
                        ", ".join(stale))
    if failures:
        sys.exit("FAIL: " + "\nFAIL: ".join(failures))
    print("OK: the table names all %d Backend methods" % len(methods))


if __name__ == "__main__":
    main()
