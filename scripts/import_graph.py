#!/usr/bin/env python
"""The import graph of a checkout, as issue 42 measured it: packages (top-level ones and their
subpackages), arrows, levels, cycles; the engine's modules; pairs of top-level packages that import
each other (an import going up); private accesses in tests; the largest modules. Usage:

    python scripts/import_graph.py .              # this tree
    python scripts/import_graph.py /path/to/worktree   # another commit (git worktree add)
"""
import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve()
TOPS = [p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in ("tests", "bench", "scripts")]
def modname(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
mods = {}
for t in TOPS:
    for p in (ROOT / t).rglob("*.py"):
        if "migrations" in p.parts: continue
        mods[modname(p)] = p
def imports(path):
    tree = ast.parse(path.read_text()); out = set()
    m = modname(path); pkg = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module
            if n.level:
                b = pkg[:len(pkg) - (n.level - 1)]
                base = ".".join(b + ([n.module] if n.module else []))
            if base:
                for a in n.names:
                    out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
    return {x for x in out if x.split(".")[0] in TOPS}
def pkg_of(m):
    parts = m.split(".")
    cand = ".".join(parts[:2])
    # a subpackage (directory) counts as its own node
    if len(parts) > 1 and (ROOT / parts[0] / parts[1]).is_dir() and (ROOT / parts[0] / parts[1] / "__init__.py").exists():
        return cand
    return parts[0]
edges = defaultdict(set)
for m, p in mods.items():
    for t in imports(p):
        a, b = pkg_of(m), pkg_of(t)
        if a != b: edges[a].add(b)
nodes = set(edges) | {b for v in edges.values() for b in v}
# SCCs
idx, low, st, on, comps = {}, {}, [], set(), []
sys.setrecursionlimit(10000)
def visit(v):
    idx[v] = low[v] = len(idx); st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in idx: visit(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: comps.append(sorted(c))
for v in sorted(nodes):
    if v not in idx: visit(v)
# levels (longest path) if acyclic
level = {}
def lv(v, seen=()):
    if v in level: return level[v]
    if v in seen: return 0
    level[v] = 1 + max((lv(w, seen + (v,)) for w in edges.get(v, ())), default=0)
    return level[v]
for v in nodes: lv(v)
n_edges = sum(len(v) for v in edges.values())
print(f"package graph: {len(nodes)} packages, {n_edges} arrows, {max(level.values())} levels, cycles: {comps}")
# engine module graph
eng = {m: p for m, p in mods.items() if m.startswith("fairsched.engine")}
e_edges = {m: {t for t in imports(p) if t in eng and t != m} for m, p in eng.items()}
elev = {}
def elv(v, seen=()):
    if v in elev: return elev[v]
    if v in seen: return 0
    elev[v] = 1 + max((elv(w, seen + (v,)) for w in e_edges[v]), default=0)
    return elev[v]
for v in eng: elv(v)
print(f"engine modules: {len(eng)} files, {sum(len(v) for v in e_edges.values())} arrows, {max(elev.values())} levels")
# private accesses in tests
txt = subprocess.run(f"grep -roE '\\b[a-z_][a-z0-9_]*\\._[a-z][a-z0-9_]*' {ROOT}/tests --include=*.py | grep -v '_meta\\|_state\\b' | wc -l",
                     shell=True, capture_output=True, text=True).stdout.strip()
print("private accesses in tests (the issue's grep):", txt)
sizes = sorted(((len(p.read_text().splitlines()), m) for m, p in mods.items()), reverse=True)[:6]
print("largest modules:", ", ".join(f"{m} {n}" for n, m in sizes))
top = defaultdict(set)
for m, p in mods.items():
    for t in imports(p):
        a, b = m.split(".")[0], t.split(".")[0]
        if a != b: top[a].add(b)
back = sorted(f"{a}->{b}" for a in top for b in top[a] if a in top.get(b, ()))
print(f"top-level graph: {sum(len(v) for v in top.values())} arrows; pairs importing each other (an arrow up): {back}")
