"""Report plots (lazymem/report/plots.py): the Pareto frontier, and PNGs per radius and cost."""

from lazymem.report.collect import load_runs, rows
from lazymem.report.plots import make_plots, pareto_frontier
from lazymem.report.tables import load_references

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pareto_frontier():
    pts = [(100, 0.8), (50, 0.7), (200, 0.9), (150, 0.75), (50, 0.6), (300, 0.9), (10, 0.5)]
    assert pareto_frontier(pts) == [6, 1, 0, 2]  # x increasing, each better than everything cheaper
    assert pareto_frontier([]) == []
    assert pareto_frontier([(1, 1)]) == [0]


def test_plots_are_pngs(sweep, tmp_path):
    out = tmp_path / "plots"
    out.mkdir()
    paths = make_plots(rows(load_runs([sweep])), load_references(), out)
    assert sorted(p.name for p in paths) == [
        "accuracy_by_radius.png",
        "accuracy_vs_total_cost_longmemeval.png",
        "figure2_longmemeval.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5000
