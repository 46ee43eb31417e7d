#!/usr/bin/env python3
"""The layers of collage's source (docs/ARCHITECTURE.md, "Layers"), checked from the includes.

Three rules, over every file under src/ and kernels/:
  1. No include runs upward: the folders, joined by their #include "folder/file.h" lines, form
     a graph without cycles. A folder is a directory (src/backend and src/backend/cpu are two).
  2. The link graph states every dependency the includes have: a file of library A that
     includes a file of library B needs B to be A or among A's dependencies in CMake
     (generated/link_graph.json, written by CMakeLists.txt), directly or through others.
  3. Every folder of source files has a README.md that says what it owns.
  4. Only the registry of architectures (src/config/architecture.cpp) names them: no other
     file compares model.arch or calls a model "an encoder" to branch on it. The rest asks
     the registry's facts (docs/ARCHITECTURE.md, "Architectures").

Usage: layers_test.py --source DIR --link-graph BUILD/generated/link_graph.json
"""
import argparse
import functools
import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A branch on the architecture's name: `arch ==`, `arch !=` (also `.arch ==` and `m.arch !=`),
# a string literal naming one in a comparison, or the old is_encoder().
ARCH_BRANCH = re.compile(r'\barch\s*[!=]=|[!=]=\s*"(?:gpt|bert|roberta)"|\bis_encoder\b')
REGISTRY = "src/config/architecture.cpp"


def source_files(root):
    for top in ("src", "kernels"):
        for directory, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".h", ".cpp", ".cu", ".cuh", ".h.in")):
                    yield os.path.relpath(os.path.join(directory, name), root)


def resolve(root, including, included):
    """The repository path of an include, or None for a generated or outside header."""
    for base in ("src", ""):
        path = os.path.normpath(os.path.join(base, included))
        if os.path.isfile(os.path.join(root, path)):
            return path
    path = os.path.normpath(os.path.join(os.path.dirname(including), included))
    if os.path.isfile(os.path.join(root, path)):
        return path
    return None


def find_cycle(graph):
    """One cycle of the graph as a list of nodes, or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--link-graph", required=True)
    args = parser.parse_args()
    root = args.source
    with open(args.link_graph) as f:
        libraries = json.load(f)

    # Each folder to its library: the library that names the folder or the nearest one above it.
    folder_library = {}
    for library, entry in libraries.items():
        for folder in entry["folders"]:
            folder_library.setdefault(folder, library)

    def library_of(path):
        folder = os.path.dirname(path)
        while folder:
            if folder in folder_library:
                return folder_library[folder]
            folder = os.path.dirname(folder)
        return None

    @functools.lru_cache(maxsize=None)
    def closure(library):
        seen, todo = set(), [library]
        while todo:
            for link in libraries.get(todo.pop(), {"links": []})["links"]:
                if link not in seen:
                    seen.add(link)
                    todo.append(link)
        return seen

    folder_edges = {}  # folder -> {included folder: an example "file -> header"}
    failures = [f"{name} links {link}, which CMakeLists.txt does not record "
                "(collage_record_library)"
                for name, entry in libraries.items() for link in entry["links"]
                if link not in libraries]
    files = list(source_files(root))
    for path in files:
        if path == "src/main.cpp":
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        if path != REGISTRY:
            for number, line in enumerate(text.splitlines(), 1):
                if ARCH_BRANCH.search(line.split("//")[0]):
                    failures.append(f"{path}:{number}: branches on the architecture's name "
                                    f"({line.strip()}); ask {REGISTRY}'s facts")
        library = library_of(path)
        if library is None:
            failures.append(f"{path}: in no library of link_graph.json")
            continue
        for included in INCLUDE.findall(text):
            target = resolve(root, path, included)
            if target is None:
                continue
            a, b = os.path.dirname(path), os.path.dirname(target)
            if a != b:
                folder_edges.setdefault(a, {}).setdefault(b, f"{path} includes {included}")
            target_library = library_of(target)
            if target_library and target_library != library and \
                    target_library not in closure(library):
                failures.append(f"{path} includes {included}, of {target_library}, but "
                                f"{library} does not link {target_library} (CMakeLists.txt)")

    for folder in sorted({os.path.dirname(path) for path in files} - {"src"}):
        if not os.path.isfile(os.path.join(root, folder, "README.md")):
            failures.append(f"{folder}/ has no README.md saying what it owns")

    cycle = find_cycle({a: set(bs) for a, bs in folder_edges.items()})
    if cycle:
        steps = [f"  {a} -> {b}: {folder_edges[a][b]}" for a, b in zip(cycle, cycle[1:])]
        failures.append("an include runs upward: these folders include each other in a "
                        "circle:\n" + "\n".join(steps))
    library_cycle = find_cycle({name: set(e["links"]) for name, e in libraries.items()})
    if library_cycle:
        failures.append("the libraries link in a circle: " + " -> ".join(library_cycle))

    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(files)} files, {len(folder_edges)} folders that include others, "
          f"{len(libraries)} libraries: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
