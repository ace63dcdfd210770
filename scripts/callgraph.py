#!/usr/bin/env python3
"""Which files of a program call each other, and the circles among them.

    scripts/callgraph.py src/node            # circles, then each file's callees
    scripts/callgraph.py --check src/node    # exit 1 if there is a circle
    scripts/callgraph.py --check --all       # every directory of src/ and lib/
    scripts/callgraph.py --why A.c B.c src/node   # the names A.c uses of B.c

A file "calls" another when its object file needs a symbol (a function or a
variable) that the other's object file defines: read with nm from the
build directory (AIRLOCK_BUILD_DIR, else build/), so it is exact. Taking a
function's address counts as a call: a callback is wired where it is
registered, and the file that calls through the pointer depends on nobody.
Only the files of the one directory are compared; lib/ is below every
program and never calls up (lib/ is linked without any program's code).
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

def objects(directory):
    """source file name -> its object file in the build directory."""
    build = Path(os.environ.get("AIRLOCK_BUILD_DIR", "build"))
    out = {}
    for o in sorted((build / directory).glob("*.p/*.c.o")):
        if (Path(directory) / o.name[:-2]).exists():  # not a stale object of a removed file
            out.setdefault(o.name[:-2], o)
    if not out:
        sys.exit(f"callgraph: no objects of {directory} under {build}: build first")
    return out


def symbols(obj):
    """(defined, needed) external symbols of one object file: nm -g -P
    prints NAME TYPE; U (w: weak) for a symbol the object needs."""
    out = subprocess.run(["nm", "-g", "-P", str(obj)], check=True, capture_output=True, text=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2:
            (needed if f[1] in ("U", "w") else defined).add(f[0])
    return defined, needed


def graph(directory):
    objs = objects(directory.rstrip("/"))
    syms = {name: symbols(o) for name, o in objs.items()}
    owner = {}
    for name, (defined, _) in syms.items():
        for d in defined:
            owner.setdefault(d, name)
    edges = {}
    for name, (_, needed) in syms.items():
        callees = {}
        for sym in needed:
            o = owner.get(sym)
            if o and o != name:
                callees.setdefault(o, set()).add(sym)
        edges[name] = callees
    return edges


def circles(edges):
    """Tarjan's strongly connected components with more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--all", action="store_true", help="every directory of src/ and lib/ (vendored llhttp aside)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a directory has a circle")
    ap.add_argument("--why", nargs=2, metavar=("FROM", "TO"))
    ap.add_argument("--quiet", action="store_true", help="only the circles")
    a = ap.parse_args()
    if a.all:
        a.dirs += sorted(str(d) for top in ("src", "lib") for d in Path(top).iterdir()
                         if d.is_dir() and d.name != "llhttp" and any(d.glob("*.c")))
    if not a.dirs:
        ap.error("name a directory, or --all")
    bad = False
    for d in a.dirs:
        edges = graph(d)
        if a.why:
            print(" ".join(sorted(edges.get(a.why[0], {}).get(a.why[1], set()))))
            continue
        comps = circles(edges)
        for comp in comps:
            bad = True
            print(f"{d}: circle of {len(comp)} files: {' '.join(comp)}")
            members = set(comp)
            for f in comp:
                back = sorted(t for t in edges[f] if t in members)
                print(f"  {f} -> {' '.join(back)}")
        if not comps:
            print(f"{d}: no circle among {len(edges)} files")
        if not a.quiet and not a.check:
            for f in sorted(edges):
                print(f"  {f}: {' '.join(sorted(edges[f]))}")
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
