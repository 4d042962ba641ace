"""dashboard.html in a real browser: opened from disk, JS run, the URL-hash filter applied.

Needs Debian's chromium at /usr/bin/chromium (`apt-get install -y chromium`).
"""

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lazymem.tasks import report as report_task

from helpers_runs import write_sweep

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium missing: install Debian's browser with `apt-get install -y chromium`")
    root = tmp_path_factory.mktemp("report")
    write_sweep(root / "sweep")
    out = root / "out"
    out.mkdir()
    cfg = OmegaConf.create({"task": "report", "report": {"inputs": [str(root / "sweep")]}})
    report_task.run(cfg, SimpleNamespace(dir=out))
    return out / "dashboard.html", root


def _chromium(root: Path, *args: str) -> str:
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={root / 'chromium-profile'}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_dom_after_js_has_tables_plots_and_all_questions(dashboard):
    page, root = dashboard
    dom = _chromium(root, "--dump-dom", page.as_uri())
    assert dom.count('<section class="table"') >= 4 and "Table 2: accuracy and All@50" in dom
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', dom)) == 3  # + accuracy vs cost
    assert dom.count('<details class="q"') == 8
    assert "8 of 8 records" in dom
    assert "<script>alert" not in dom  # the hostile memory text stays text


def test_hash_filter_lists_only_matching_questions(dashboard):
    page, root = dashboard
    dom = _chromium(root, "--dump-dom", page.as_uri() + "#method=lazymem_4b&correct=0")
    items = re.findall(r'<details class="q"[^>]*>', dom)
    assert len(items) == 1, items  # only w=0's q2 is wrong for lazymem_4b
    assert 'data-method="lazymem_4b"' in items[0] and 'data-correct="0"' in items[0]
    assert "1 of 8 records" in dom


def test_screenshot_renders(dashboard):
    page, root = dashboard
    shot = root / "dashboard.png"
    _chromium(root, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000
