#!/usr/bin/env python3
"""
The tree's structure as docs/architecture.md draws it, checked:

- the include graph between top-level folders points down only: tools/ over engine/ and
  interpose/ (siblings: neither includes the other), over policy/, over vmm/ (with
  include/, the public header), over kernels/ at the bottom;
- engine/'s sub-folders include each other without a cycle, as the page's second picture
  draws them: every arrow drawn exists, and every include follows the arrows (directly or
  through others); nothing lies loose in engine/ itself;
- every source file is named on the page (its name, `name.c/h`, or a pattern like
  `evict_*.c`), so that its tables are the tree's;
- every path of this tree that a comment or a document cites (`engine/forward/moe_step.c`,
  `docs/policies.md`) exists, so that a move or a rename leaves no stale pointer;
- no source file outside tests/ is over 800 lines, tables (*.inc) aside;
- no function outside tests/ is over 100 lines.

Usage: check_layout.py [SOURCE_DIR]. Prints every violation and exits 1 if there is any.
"""
import fnmatch
import os
import re
import sys

RANK = {"kernels": 0, "include": 1, "vmm": 1, "policy": 2, "engine": 3, "interpose": 3,
        "tools": 4}
CODE = (".c", ".h", ".cu", ".cuh", ".cc", ".py")
MAX_FILE, MAX_FUNC = 800, 100
# Named exceptions, each with why; printed on every run so that none is forgotten.
EXEMPT_SIZE = {}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DOC = "docs/architecture.md"
FENCE = re.compile(r"```.*?```", re.S)


def sources(root):
    for top in RANK:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                yield os.path.relpath(os.path.join(d, f), root)
    for d, _, files in os.walk(os.path.join(root, "bench")):
        for f in sorted(files):
            yield os.path.relpath(os.path.join(d, f), root)


def folder_of(path):
    """The include's folder: 'engine/model' for engine/model/model.h, 'vmm' for vmm/options.h."""
    parts = path.split("/")
    if parts[0] == "include":
        return "include"
    if parts[0] == "engine" and len(parts) > 2:
        return "engine/" + parts[1]
    return parts[0]


def top(folder):
    """include/ (the public header) is vmm's."""
    t = folder.split("/")[0]
    return "vmm" if t == "include" else t


def includes(root, rel):
    text = open(os.path.join(root, rel), errors="replace").read()
    for inc in INCLUDE.findall(text):
        if inc.startswith("moevm/"):
            inc = "include/" + inc
        if inc.split("/")[0] in RANK:
            yield inc


def check_includes(root, files, bad):
    edges = {}
    for rel in files:
        if not rel.endswith(CODE) or rel.startswith("bench/"):
            continue
        src = folder_of(rel)
        if src == "engine":
            bad.append(f"{rel}: loose in engine/ (every file belongs to a sub-folder)")
        for inc in includes(root, rel):
            dst = folder_of(inc)
            if top(src) == top(dst):
                if src != dst:
                    edges.setdefault(src, set()).add(dst)
                continue
            if RANK[top(dst)] >= RANK[top(src)]:
                bad.append(f"{rel}: includes {inc}: {top(src)}/ may include only the layers "
                           f"below it")
    # engine's sub-folders: no cycle (a depth-first search for a back edge)
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                cyc = stack[stack.index(m):] + [m]
                bad.append("include cycle: " + " -> ".join(cyc))
            elif not state.get(m):
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if not state.get(n):
            visit(n)
    return edges


def drawn_engine_edges(doc):
    """The picture of engine/'s sub-folders: lines of 'a, b  ->  c  ->  d' chains, several
    to a line split by ';', in the fenced block that draws them (the one naming 'api')."""
    drawn = set()
    for block in FENCE.findall(doc):
        if "->" not in block or "api" not in block:
            continue
        for line in block.strip("`").splitlines():
            for chain in line.split(";"):
                steps = [[w.strip() for w in part.split(",") if w.strip()]
                         for part in chain.split("->")]
                for a, b in zip(steps, steps[1:]):
                    drawn.update(("engine/" + x, "engine/" + y) for x in a for y in b)
    return drawn


def check_engine_picture(doc, edges, bad):
    drawn = drawn_engine_edges(doc)
    if not drawn:
        bad.append(f"{DOC}: no picture of engine/'s sub-folders found")
        return
    reach = {}
    for a, b in drawn:
        reach.setdefault(a, set()).add(b)
    changed = True
    while changed:  # the transitive closure: an include may skip a drawn step
        changed = False
        for a in reach:
            more = set().union(*(reach.get(b, set()) for b in reach[a])) - reach[a]
            if more:
                reach[a] |= more
                changed = True
    actual = {(a, b) for a, bs in edges.items() if a.startswith("engine/")
              for b in bs if b.startswith("engine/")}
    for a, b in sorted(actual):
        if b not in reach.get(a, ()):
            bad.append(f"{DOC}: engine picture lacks {a} -> {b}, which the code has")
    for a, b in sorted(drawn - actual):
        bad.append(f"{DOC}: engine picture draws {a} -> {b}, which no include makes")


def named_patterns(doc):
    """Every backticked word of the page outside its fenced blocks: a file name, a path,
    'name.c/h' (both), or a pattern ('evict_*.c', 'templates/*.jinja')."""
    pats = set()
    for tick in re.findall(r"`([^`\n]+)`", FENCE.sub("", doc)):
        for w in re.split(r"[,\s]+", tick):
            w = w.strip("()")
            m = re.match(r"^(.*)\.(\w+)/(\w+)$", w)
            if m:
                pats.update({f"{m.group(1)}.{m.group(2)}", f"{m.group(1)}.{m.group(3)}"})
            elif w:
                pats.add(w)
    return pats


def check_named(doc, files, bad):
    pats = named_patterns(doc)
    for rel in files:
        if rel.startswith("bench/"):
            continue
        parts = rel.split("/")
        # a pattern names a file by its last components: 'x.c', 'templates/x.jinja', ...
        tails = {"/".join(parts[i:]) for i in range(len(parts))}
        if not any(fnmatch.fnmatchcase(t, p) for p in pats for t in tails):
            bad.append(f"{rel}: not named in {DOC} (add it to its folder's table)")


CITED = re.compile(r"(?<![\w/.-])((?:vmm|policy|engine|interpose|kernels|tools|tests|docs|bench|"
                   r"scripts|include|cmake)/[\w./-]+?\.(?:cuh|cu|cc|cmake|c|h|md|py|sh|inc|"
                   r"txt|json|map|jinja))(?!\w)")
CITING = ("tests", "docs", "scripts", "cmake", "README.md", "CMakeLists.txt", "Makefile")


def check_cited(root, files, bad):
    """Paths cited by the sources, tests, scripts and documents (not what a build made)."""
    texts = list(files)
    for top in CITING:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            texts.append(top)
        for d, _, names in os.walk(path):
            texts += [os.path.relpath(os.path.join(d, n), root) for n in sorted(names)]
    for rel in texts:
        try:
            text = open(os.path.join(root, rel), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue  # binary files, the corpora's seeds among them
        for cited in sorted(set(CITED.findall(text))):
            if not os.path.exists(os.path.join(root, cited)):
                bad.append(f"{rel}: cites {cited}, which is not in the tree")


def check_sizes(root, files, bad):
    for rel in files:
        if not rel.endswith(CODE):
            continue
        lines = open(os.path.join(root, rel), errors="replace").read().split("\n")
        if rel in EXEMPT_SIZE:
            print(f"exempt: {rel} ({len(lines) - 1} lines): {EXEMPT_SIZE[rel]}")
        elif len(lines) - 1 > MAX_FILE:
            bad.append(f"{rel}: {len(lines) - 1} lines (at most {MAX_FILE}; split it by "
                       f"concern)")
        if rel.endswith(".py"):
            continue
        # C functions as this tree writes them: the header from column 0, the body's braces
        # at column 0.
        start = None
        for i, line in enumerate(lines):
            if start is None and line.startswith("{"):
                j = i - 1
                while j > 0 and lines[j][:1] in (" ", "\t"):
                    j -= 1
                start = j
            elif start is not None and line.startswith("}"):
                n = i - start + 1
                if n > MAX_FUNC and not lines[start].startswith(("static const", "const")):
                    bad.append(f"{rel}:{start + 1}: a function of {n} lines (at most "
                               f"{MAX_FUNC}): {lines[start].strip()[:60]}")
                start = None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                              "..", "..")
    files = list(sources(root))
    bad = []
    edges = check_includes(root, files, bad)
    doc = open(os.path.join(root, DOC), encoding="utf-8").read()
    check_engine_picture(doc, edges, bad)
    check_named(doc, files, bad)
    check_cited(root, files, bad)
    check_sizes(root, files, bad)
    for b in bad:
        print(b)
    print(f"layout: {len(files)} files, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
