"""The dashboard (lazymem/report/dashboard.py) escapes model output and fetches nothing from outside."""

import json

from lazymem.report.collect import load_runs, rows
from lazymem.report.dashboard import render
from lazymem.report.plots import make_plots
from lazymem.report.tables import build_tables, load_references

from helpers_runs import EVIL


def test_dashboard_escapes_model_output(sweep, tmp_path):
    runs = load_runs([sweep])
    flat = rows(runs)
    page = render(build_tables(flat), make_plots(flat, load_references(), tmp_path), runs)
    assert "<script>alert" not in page and "</script><script>" not in page
    assert page.count("data:image/png;base64,") == 3
    data = page.split('id="report-data">')[1].split("</script>")[0]
    records = json.loads(data)["records"]
    assert len(records) == 8 and EVIL in records[0]["memory"]
    assert "http://" not in page and "https://" not in page  # nothing fetched from outside
