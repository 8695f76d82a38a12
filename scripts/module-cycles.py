#!/usr/bin/env python3
"""Fails when a crate's modules import each other in a cycle.

Reads each crate's `src/` as text: a module is a file (`a/b.rs` or `a/b/mod.rs` is `a::b`; test
files, `*tests.rs`, are left out), and module `m` depends on module `n` when `m`'s code names a
path under `crate::`, `super::` or `self::` that resolves to `n` (the longest prefix that is a
module). Comments and `#[cfg(test)] mod tests { .. }` blocks are left out. A strongly connected
component of more than one module is a cycle: the crate's layering is broken.

Usage: scripts/module-cycles.py CRATE_DIR...   (exit 1 and the cycles on stdout if any)
"""
import os
import re
import sys


def modules(src):
    out = {}
    for d, _, fs in os.walk(src):
        for f in fs:
            if not f.endswith('.rs'):
                continue
            path = os.path.join(d, f)
            parts = os.path.relpath(path, src)[:-3].split('/')
            if parts[-1] in ('mod', 'lib', 'main'):
                parts = parts[:-1]
            if parts and parts[-1].endswith('tests'):
                continue
            out['::'.join(parts)] = path
    return out


def strip(text):
    text = re.sub(r'#\[cfg\(test\)\]\s*mod tests \{.*', '', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def edges(mods):
    def resolve(parts):
        for n in range(len(parts), 0, -1):
            name = '::'.join(parts[:n])
            if name in mods:
                return name
        return None

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        text = strip(open(path, encoding='utf-8').read())
        me = m.split('::') if m else []
        paths = []
        for hit in re.finditer(r'\b(crate|super|self)((?:::\w+)+)', text):
            kind, rest = hit.group(1), hit.group(2).strip(':').split('::')
            # `super` of `a::b` is `a`, whether b is `a/b.rs` or `a/b/mod.rs`.
            base = {'crate': [], 'super': me[:-1], 'self': me}[kind]
            while rest and rest[0] == 'super':
                base, rest = base[:-1], rest[1:]
            paths.append(base + rest)
        for hit in re.finditer(r'\buse (crate|super|self)::\{([^}]*)\}', text):
            base = {'crate': [], 'super': me[:-1], 'self': me}[hit.group(1)]
            for item in hit.group(2).split(','):
                paths.append(base + item.strip().split('::'))
        for p in paths:
            target = resolve(p)
            if target is not None and target != m:
                graph[m].add(target)
    return graph


def cycles(graph):
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    failed = False
    for crate in sys.argv[1:]:
        graph = edges(modules(os.path.join(crate, 'src')))
        found = cycles(graph)
        print(f'{crate}: {len(graph)} modules, {len(found)} import cycles')
        for comp in found:
            failed = True
            print('  cycle: ' + ', '.join(comp))
            for m in comp:
                print(f'    {m or "<crate root>"} -> ' + ', '.join(sorted(graph[m] & set(comp))))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
