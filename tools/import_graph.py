"""The crate's import graph, for keeping the layering of ARCHITECTURE.md honest.

Files of a crate's src/ are nodes; every `crate::..`, `super::..` and `self::..` path in code
(comments and docs stripped) is an edge to the module file it names. Prints:
- circles (strongly connected files), ignoring a module's edges to its own children;
- imports from a child to its parent module's file (informative);
- room imports that run back up the layering, where a room is a top-level module and
  the layering is the order of ARCHITECTURE.md's map (`order` below).

Run from the repository root: `python3 tools/import_graph.py [burn-0.21/src or core/src]`. Plain text parsing,
no dependencies; approximate where a path is built by a macro.
"""
import os, re, sys, itertools
root = sys.argv[1] if len(sys.argv) > 1 else 'burn-0.21/src'
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3]
            parts = rel.split('/')
            if parts[-1] in ('mod', 'lib'):
                parts = parts[:-1]
            files[tuple(parts)] = p
def resolve(path):
    # longest prefix that is a file module
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in files:
            return tuple(path[:n])
    return None
edges = {}
for mod, p in files.items():
    src = open(p).read()
    # strip comments
    src = re.sub(r'//[^\n]*', '', src)
    targets = set()
    # expand use groups crudely: crate::a::{b, c::d}
    for m in re.finditer(r'\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)(::\{([^;]*?)\})?', src):
        head, rest, _, group = m.group(1), m.group(2), m.group(3), m.group(4)
        if head == 'crate':
            start = []
        elif head == 'self':
            start = list(mod)
        else:  # super
            start = list(mod[:-1])
        segs = [s for s in rest.split('::') if s]
        while segs and segs[0] == 'super':
            start = start[:-1]; segs = segs[1:]
        paths = [start + segs]
        if group:
            for g in group.split(','):
                g = g.strip().split(' as ')[0].strip()
                if g:
                    paths.append(start + segs + [s for s in g.split('::') if s and s != '{'])
        for q in paths:
            t = resolve(q)
            if t is not None and t != mod and t != ():
                targets.add(t)
    edges[mod] = targets
# drop edges parent->child declared via `mod x;` (those are declarations, but imports too, keep)
def scc(nodes, edges):
    index = {}; low = {}; st = []; on = set(); out = []; c = [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    for v in nodes:
        if v not in index: visit(v)
    return [c for c in out if len(c) > 1]
def name(m): return '/'.join(m) or 'lib'
# file level, ignoring edges from a module file to its own children (mod.rs declaring/re-exporting children)
fe = {m: {t for t in ts if not (len(t) > len(m) and t[:len(m)] == m)} for m, ts in edges.items()}
comps = scc(list(files), fe)
print('file-level circles (parent->child edges ignored):', len(comps))
for c in comps: print('  ', sorted(name(x) for x in c))
# back-ups: child importing its ancestor's own file (not via re-export resolution)
ups = [(name(m), name(t)) for m, ts in fe.items() for t in ts if len(t) < len(m) and m[:len(t)] == t and t != ()]
print('imports running back up (child -> ancestor module file):', len(ups))
for u in sorted(ups): print('  ', u)
# room level
re_ = {}
for m, ts in edges.items():
    if not m: continue
    for t in ts:
        if t and t[0] != m[0]:
            re_.setdefault((m[0],), set()).add((t[0],))
rooms = sorted({(m[0],) for m in files if m})
comps = scc(rooms, re_)
print('room-level circles:', len(comps))
for c in comps: print('  ', sorted(name(x) for x in c))
# layering (low -> high); an import from a lower layer to a higher one runs back up
# The core's rooms (core/src) and the front-end's (burn-0.21/src) in one order: a front-end
# reaches the core's modules through re-exports of the same names.
order = ['spec', 'random', 'host', 'layout', 'config', 'descriptor', 'semantics', 'reserve', 'gates', 'checksum',
         'op_types', 'dropout', 'reference', 'backend',
         'cpu', 'cube', 'cudnn', 'fusion', 'autodiff', 'ops', 'module', 'interop', 'nn', 'testing']
rank = {n: i for i, n in enumerate(order)}
same = []
back = []
for m, ts in edges.items():
    if not m or m[0] not in rank: continue
    for t in ts:
        if t and t[0] in rank and rank[t[0]] > rank[m[0]] and not any(m[0] in s and t[0] in s for s in same):
            back.append((name(m), name(t)))
print('room imports running back up the layering:', len(back))
for b in sorted(set(back)): print('  ', b)
print('rooms not in the layering:', sorted({m[0] for m in files if m and m[0] not in rank}))
