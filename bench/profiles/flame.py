#!/usr/bin/env python3
"""Folds `perf script` output into stacks and draws them as a flame graph (SVG).

    perf script -i perf.data | python3 bench/profiles/flame.py --title "B2 x1000" > out.svg
    perf script -i perf.data | python3 bench/profiles/flame.py --folded > out.folded

Frames are the functions perf resolved (Rust hashes and generic arguments trimmed, so a
frame reads `tokio::runtime::task::harness::Harness::poll`). No dependencies.
"""
import argparse
import html
import re
import sys
from collections import defaultdict

HASH = re.compile(r"::h[0-9a-f]{16}$")
OFFSET = re.compile(r"\+0x[0-9a-f]+$")


def clean(sym):
    """Trims a demangled Rust symbol: `<a::B<T> as c::D>::f::h0123…` → `a::B as c::D>::f`
    without generic arguments and hash."""
    sym = HASH.sub("", OFFSET.sub("", sym))
    out, stack = [], []
    for ch in sym:
        if stack and stack[-1] == "g":
            if ch == "<":
                stack.append("g")
            elif ch == ">":
                stack.pop()
            continue
        if ch == "<":
            # Generic arguments follow a name; a qualified path starts a segment.
            stack.append("g" if out and (out[-1].isalnum() or out[-1] == "_") else "q")
            continue
        if ch == ">" and stack:
            stack.pop()
            continue
        out.append(ch)
    return "".join(out).strip() or sym


def fold(lines):
    """`perf script` blocks (header line, then one frame per line) → {stack: samples}."""
    stacks = defaultdict(int)
    comm, frames = None, []

    def flush():
        if comm is not None:
            stacks[";".join([comm] + list(reversed(frames)))] += 1

    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
        elif not line.startswith((" ", "\t")):
            flush()
            comm, frames = line.split()[0], []
        else:
            parts = line.strip().split(None, 1)
            sym = parts[1] if len(parts) > 1 else parts[0]
            sym = re.sub(r"\s+\(.*\)$", "", sym)
            frames.append("[unknown]" if sym.startswith("[unknown]") else clean(sym))
    flush()
    return stacks


def color(name):
    h = sum(ord(c) for c in name)
    if name.startswith(("server::", "app::", "bench::")):
        return "rgb(90,%d,230)" % (140 + h % 80)
    if "[k]" in name or name.startswith(("__", "entry_", "tcp_", "do_", "sys", "ip_")):
        return "rgb(230,%d,60)" % (120 + h % 80)
    return "rgb(240,%d,%d)" % (150 + h % 90, 40 + h % 50)


def svg(stacks, title, width=1600, row=16):
    root = {"n": 0, "kids": {}}
    for stack, n in stacks.items():
        node = root
        node["n"] += n
        for f in stack.split(";"):
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    total = max(root["n"], 1)
    rects = []

    def walk(node, x, depth):
        for name, kid in sorted(node["kids"].items()):
            w = kid["n"] / total * (width - 20)
            if w >= 0.3:
                rects.append((x, depth, w, name, kid["n"]))
                walk(kid, x, depth + 1)
            x += w

    walk(root, 10.0, 0)
    depth = max((d for _, d, _, _, _ in rects), default=0) + 1
    height = depth * row + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f'<rect width="100%" height="100%" fill="#fdfdf6"/>',
        f'<text x="10" y="20" font-size="15">{html.escape(title)} ({total} samples)</text>',
    ]
    for x, d, w, name, n in rects:
        y = height - 20 - (d + 1) * row
        label = html.escape(name)
        pct = 100.0 * n / total
        chars = int(w / 7)
        text = label if len(name) <= chars else html.escape(name[: max(chars - 2, 0)]) + ".."
        out.append(
            f'<g><title>{label} ({n} samples, {pct:.2f}%)</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" fill="{color(name)}"/>'
            + (f'<text x="{x + 2:.1f}" y="{y + row - 4}">{text}</text>' if chars >= 3 else "")
            + "</g>"
        )
    out.append("</svg>")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--folded", action="store_true", help="print folded stacks instead")
    args = ap.parse_args()
    stacks = fold(sys.stdin)
    if args.folded:
        for s, n in sorted(stacks.items(), key=lambda kv: -kv[1]):
            print(s, n)
    else:
        print(svg(stacks, args.title))


if __name__ == "__main__":
    main()
