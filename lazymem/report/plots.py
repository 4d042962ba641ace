"""PNG plots: Figure 2's two trade-off panels per benchmark, accuracy by radius w and by training stage.

Our runs are drawn in colour with a dashed Pareto frontier; the paper's points (Tables 1, 7, 8), where
the benchmark has them, in grey with a dotted frontier, so a reader sees both on the same axes.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lazymem.numeric import mean  # noqa: E402
from lazymem.report.costs import cost_plot  # noqa: E402
from lazymem.report.tables import STAGE_ORDER, _is_lazymem  # noqa: E402

GREY = "#9a9a9a"


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (x lower-or-equal and y higher-or-equal, one strictly).

    Lower x (tokens, seconds) and higher y (accuracy) are better; returned in increasing x.
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    frontier, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            frontier.append(i)
            best = points[i][1]
    return frontier


def _label(r: dict, multi_run: bool) -> str:
    return f"{r['method']} [{r['run']}]" if multi_run else r["method"]


def _frontier_line(ax, xs, ys, **style):
    idx = pareto_frontier(list(zip(xs, ys, strict=True)))
    if len(idx) > 1:
        ax.plot([xs[i] for i in idx], [ys[i] for i in idx], **style)


def _paper_points(ref: dict, bench: str, kind: str) -> list[tuple[str, float, float, tuple | None]]:
    """(method, x, LJ, (p50, p95) or None) for the paper's methods with both numbers on this benchmark."""
    acc = ref["table1_accuracy"]["rows"]
    out = []
    if kind == "tokens":
        for m, by_bench in ref["table7_memory_tokens"]["rows"].items():
            lj = ((acc.get(m) or {}).get(bench) or {}).get("LJ")
            x = (by_bench or {}).get(bench)
            if x and lj is not None:
                out.append((m, x, lj, None))
    elif ref["table8_latency_s"].get("benchmark") == bench:
        for m, st in ref["table8_latency_s"]["rows"].items():
            lj = ((acc.get(m) or {}).get(bench) or {}).get("LJ")
            tot = (st or {}).get("total") or {}
            if tot.get("mean") and lj is not None:
                out.append((m, tot["mean"], lj, (tot.get("median"), tot.get("p95"))))
    return out


def _panel(ax, rows: list[dict], ref: dict, bench: str, kind: str, multi_run: bool):
    pts = []
    for r in rows:
        if r["accuracy"] is None:
            continue
        if kind == "tokens":
            x = r["memory_tokens"].get("mean")
            bar = None
        else:
            tot = r["latency_s"].get("total") or {}
            x, bar = tot.get("mean"), (tot.get("median"), tot.get("p95"))
        if x is not None and x > 0:
            pts.append((_label(r, multi_run), x, r["accuracy"], bar))
    paper = _paper_points(ref, bench, kind)
    for group, color, line, marker in ((paper, GREY, ":", "o"), (pts, None, "--", "o")):
        xs, ys = [p[1] for p in group], [p[2] for p in group]
        for name, x, y, bar in group:
            c = color or f"C{zlib.crc32(name.encode()) % 10}"
            if bar and bar[0] is not None and bar[1] is not None:
                ax.hlines(y, bar[0], bar[1], color=c, lw=2, alpha=0.6)
            face = "none" if color else c
            ax.plot(x, y, marker, color=c, mfc=face, ms=7)
            text = f"{name}\n{x:,.0f}" if kind == "tokens" else f"{name}\n{x:.1f}s"
            ax.annotate(
                text, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7, color=color or "k"
            )
        _frontier_line(ax, xs, ys, ls=line, color=color or "k", lw=1)
    if kind == "tokens":
        ax.set_xscale("log")
        ax.set_xlabel("answer-context memory tokens (mean, log scale)")
    else:
        ax.set_xlabel("end-to-end latency per question, s (mean; bar P50-P95)")
    ax.set_ylabel("LLM-judge accuracy")
    ax.grid(alpha=0.3)
    return bool(pts or paper)


def figure2(rows: list[dict], ref: dict, out: Path) -> list[Path]:
    paths = []
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        sub = [r for r in rows if r["benchmark"] == bench and not r["not_applicable"]]
        multi_run = len({r["run"] for r in sub}) > 1
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        _panel(axes[0], sub, ref, bench, "tokens", multi_run)
        _panel(axes[1], sub, ref, bench, "latency", multi_run)
        axes[0].set_title(f"{bench}: accuracy vs memory tokens")
        axes[1].set_title(f"{bench}: accuracy vs latency")
        fig.text(
            0.5, 0.01, "filled = ours (dashed: Pareto frontier); hollow grey = paper", ha="center", fontsize=8
        )
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        paths.append(_save(fig, out / f"figure2_{bench}.png"))
    return paths


def radius_plot(rows: list[dict], ref: dict, out: Path, aliases: dict | None = None) -> Path | None:
    aliases = aliases or {}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if (
            r["w"] is not None
            and r["accuracy"] is not None
            and (r["windows"] or _is_lazymem(r["method"], aliases))
        ):
            groups.setdefault((r["benchmark"], r["method"]), []).append(r)
    groups = {k: sorted(v, key=lambda r: r["w"]) for k, v in groups.items() if len({r["w"] for r in v}) > 1}
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    paper = (ref.get("table2_radius") or {}).get("rows") or {}
    for (bench, method), g in groups.items():
        ax.plot([r["w"] for r in g], [r["accuracy"] for r in g], "o-", label=f"{method} ({bench})")
    for bench in dict.fromkeys(b for b, _ in groups):
        ws = sorted(int(w) for w in paper if bench in paper[w])
        if ws:
            ys = [paper[str(w)][bench]["LJ"] for w in ws]
            ax.plot(ws, ys, "s:", color=GREY, mfc="none", label=f"paper LazyMem-4B ({bench})")
    ax.set_xlabel("window radius w")
    ax.set_ylabel("LLM-judge accuracy")
    ax.set_xticks(sorted({r["w"] for g in groups.values() for r in g} | {int(w) for w in paper}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out / "accuracy_by_radius.png")


def stage_plot(rows: list[dict], ref: dict, out: Path) -> Path | None:
    staged = [r for r in rows if r["stage"] and r["windows"] and r["accuracy"] is not None]
    if not staged:
        return None
    benches = list(dict.fromkeys(r["benchmark"] for r in staged))
    stages = sorted(
        {r["stage"] for r in staged}, key=lambda s: (STAGE_ORDER.index(s) if s in STAGE_ORDER else 9, s)
    )
    paper = (ref.get("table3_stages") or {}).get("rows") or {}
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    width = 0.8 / (2 * len(benches))
    for b_i, bench in enumerate(benches):
        ours = [
            mean([r["accuracy"] for r in staged if r["benchmark"] == bench and r["stage"] == s])
            for s in stages
        ]
        refs = [((paper.get(s.lower()) or {}).get(bench) or {}).get("LJ") for s in stages]
        base = [i + (2 * b_i) * width - 0.4 + width / 2 for i in range(len(stages))]
        ax.bar(base, [v or 0 for v in ours], width, label=f"ours ({bench})", color=f"C{b_i}")
        ax.bar(
            [x + width for x in base],
            [v or 0 for v in refs],
            width,
            label=f"paper ({bench})",
            color=f"C{b_i}",
            alpha=0.35,
            hatch="//",
        )
    ax.set_xticks(range(len(stages)), stages)
    ax.set_xlabel("training stage of the memory model")
    ax.set_ylabel("LLM-judge accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out / "accuracy_by_stage.png")


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_plots(rows: list[dict], ref: dict, out: Path, aliases: dict | None = None) -> list[Path]:
    paths = figure2(rows, ref, out)
    paths += [p for p in (radius_plot(rows, ref, out, aliases), stage_plot(rows, ref, out)) if p]
    paths += cost_plot(rows, out)
    return paths
