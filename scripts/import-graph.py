#!/usr/bin/env python3
"""The import graph of src/, file by file, and any circle in it.

    scripts/import-graph.py            print the circles (exit 1 if there is one)
    scripts/import-graph.py --edges    also print every arrow: file -> file it imports from

An arrow A -> B means A names something of B through `crate::`, `super::` or
a child module's path (`use queue::Queue` in worker/mod.rs), re-exports
included (`pub use client::Ops` in ops/mod.rs is an arrow to ops/client.rs).
Declaring a child (`mod queue;`) is not an arrow of its own. Test modules
(`#[cfg(test)] mod tests { ... }` to the end of the file, and files under a
`tests` module) are left out: tests may use anything.
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
SRC = os.path.normpath(SRC)


def module_files():
    """Map of module path (tuple of names, () = crate root) -> file path."""
    mods = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue  # a `#[cfg(test)] mod tests;` file
            rel = os.path.relpath(os.path.join(root, f), SRC)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"],):
                parts = []
            if parts == ["main"]:
                continue  # the binary: its own crate, it imports through `idemgate::`
            if "cli" in parts[:1]:
                continue  # the binary's modules
            mods[tuple(parts)] = os.path.join(root, f)
    return mods


TOKENS = re.compile(
    r"//[^\n]*"  # a line comment
    r"|/\*.*?\*/"  # a block comment
    r"|\br(#*)\".*?\"\1"  # a raw string
    r'|b?"(?:\\.|[^"\\])*"'  # a string
    r"|'(?:\\.|[^'\\])'",  # a char
    re.S,
)


def strip(text):
    """Source without comments, strings and test modules."""
    text = TOKENS.sub(lambda m: '""' if m.group(0)[:1] in "rb\"'" else " ", text)
    m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    return text


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']"""
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0].strip()]
    prefix, inner = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out += [prefix + q for q in expand(p)]
    return out


def resolve(path, here, mods):
    """The file a `::` path names, seen from module `here`, or None."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] == "super":
        base = here[:-1]
        segs = segs[1:]
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    elif segs[0] == "self":
        base, segs = here, segs[1:]
    elif here + (segs[0],) in mods:
        base = here
    else:
        return None
    best = base if base in mods else None
    cur = base
    for s in segs:
        cur = cur + (s,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def root_aliases(mods):
    """`pub use error::Error;` in lib.rs: `crate::Error` is error.rs's."""
    aliases = {}
    text = strip(open(mods[()], encoding="utf-8").read())
    for m in re.finditer(r"\bpub\s+use\s+([^;]+);", text):
        for p in expand(m.group(1)):
            name = p.split("::")[-1]
            t = resolve("crate::" + p, (), mods)
            if t is not None and t != ():
                aliases[name] = t
    return aliases


def resolve_aliased(path, here, mods, aliases):
    t = resolve(path, here, mods)
    if t == ():
        segs = path.split("::")
        return aliases.get(segs[1]) if len(segs) > 1 else None
    return t


def graph():
    mods = module_files()
    aliases = root_aliases(mods)
    edges = {}
    for mod, path in mods.items():
        if mod == ():
            continue  # the crate root declares every module and re-exports a few names
        text = strip(open(path, encoding="utf-8").read())
        targets = set()
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            for p in expand(m.group(1)):
                targets.add(resolve_aliased(p, mod, mods, aliases))
        for m in re.finditer(r"(?<![\w:])(\w+(?:::\w+)+)", text):
            targets.add(resolve_aliased(m.group(1), mod, mods, aliases))
        targets.discard(None)
        targets.discard(mod)
        # Declaring a child (`mod child;`) is no arrow; `use child::X` and `pub use child::X`
        # in the parent are (read above).
        edges[mod] = targets
    return mods, edges


def circles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    mods, edges = graph()
    name = lambda m: os.path.relpath(mods[m], os.path.dirname(SRC))
    mods = {m: p for m, p in mods.items() if m != ()}
    if "--edges" in sys.argv:
        for m in sorted(edges, key=name):
            for t in sorted(edges[m], key=name):
                print(f"{name(m)} -> {name(t)}")
    found = circles(edges)
    for c in found:
        files = sorted(name(m) for m in c)
        print(f"circle of {len(c)} files: {', '.join(files)}")
        members = set(c)
        for m in sorted(c, key=name):
            for t in sorted(edges[m] & members, key=name):
                print(f"  {name(m)} -> {name(t)}")
    if not found:
        print(f"no circle: {len(mods)} files, {sum(len(v) for v in edges.values())} arrows, a DAG")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
