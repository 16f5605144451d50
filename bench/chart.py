#!/usr/bin/env python3
"""Draws the benchmark summary as an SVG bar chart: server CPU per request relative to the
best peer of the same run (1.00 = the best established server; shorter is better), one
group of bars per benchmark.

    bench/chart.py                          # bench/summary.tsv -> bench/summary.svg
    bench/chart.py --report "HTTP/1.1=bench/out/h1-2026-11-23.md" ... -o chart.svg

--report reads the table a bench script writes (bench/out/*.md: | server | requests/s |
server CPU µs/req | ratio to best peer |); without it the rows of bench/summary.tsv are
drawn. Ratios above 3 are drawn cut at 3 with their value written. Standard library only.
"""
import argparse
import html
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read_tsv(path):
    groups = {}
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        proto, _cmd, server, us, ratio = line.rstrip("\n").split("\t")
        groups.setdefault(proto, []).append((server, float(us), float(ratio)))
    return groups


def read_report(path):
    rows = []
    for line in open(path, encoding="utf-8"):
        # | server | requests/s | µs/req | [kernel share |] ratio |
        m = re.match(r"\|\s*([^|]+?)\s*\|\s*[\d.]+\s*\|\s*([\d.]+)\s*\|(?:\s*[\d.]+%\s*\|)?\s*([\d.]+)\s*\|\s*$", line)
        if m and not m.group(1).startswith("server"):
            rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
    if not rows:
        sys.exit(f"{path}: no result table")
    return rows


def svg(groups):
    cap, width, label_w, bar_h, gap = 3.0, 760, 250, 18, 26
    plot_w = width - label_w - 140
    height = 50 + sum(len(rows) * bar_h + gap + 18 for rows in groups.values()) + 20
    x = lambda r: label_w + plot_w * min(r, cap) / cap
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">'
        "Server CPU per request, relative to the best peer of the same run (lower is better)</text>",
    ]
    y = 44
    for proto, rows in groups.items():
        out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{html.escape(proto)}</text>')
        y += 18
        top = y
        for server, us, ratio in sorted(rows, key=lambda r: r[2]):
            ours = server.startswith("selvedge")
            color = "#c0392b" if ours else "#7f8c8d"
            out.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{html.escape(server)}</text>')
            out.append(f'<rect x="{label_w}" y="{y + 2}" width="{x(ratio) - label_w:.1f}" height="{bar_h - 4}" fill="{color}"/>')
            text = f"{ratio:.2f} ({us:g} µs)" + (" ›" if ratio > cap else "")
            weight = ' font-weight="bold"' if ours else ""
            out.append(f'<text x="{x(ratio) + 5:.1f}" y="{y + 13}"{weight}>{text}</text>')
            y += bar_h
        out.append(f'<line x1="{x(1.0):.1f}" y1="{top}" x2="{x(1.0):.1f}" y2="{y}" stroke="black" stroke-dasharray="3,3"/>')
        y += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", action="append", default=[], metavar="LABEL=FILE")
    p.add_argument("--tsv", default=os.path.join(HERE, "summary.tsv"))
    p.add_argument("-o", "--output", default=os.path.join(HERE, "summary.svg"))
    a = p.parse_args()
    if a.report:
        groups = {}
        for r in a.report:
            label, _, path = r.partition("=")
            groups[label] = read_report(path)
    else:
        groups = read_tsv(a.tsv)
    with open(a.output, "w", encoding="utf-8") as f:
        f.write(svg(groups))
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
