"""`pip install .` (not editable) gives a working `lazymem` command: built offline from a copy of the
checkout into a fresh virtual environment that sees .venv's dependencies, run from outside the checkout.
Building and installing the package print nothing: no setuptools warnings in a first `make setup`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from helpers import ROOT

pytestmark = pytest.mark.slow


def sh(*cmd, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, f"{cmd}: {out.stdout[-2000:]}{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of what git would ship (tracked and untracked, not ignored): a build leaves build/ and
    *.egg-info behind, and ignored local files (conf/local/) must not slip into the wheel."""
    files = sh("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).stdout
    src = tmp_path_factory.mktemp("package") / "src"
    for rel in filter(None, files.split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    return src


def fresh_venv(venv: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a new venv at `venv` that sees .venv's packages."""
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=venv.parent)
    py = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(sh(py, "-c", code, cwd=venv.parent).stdout.strip())
    # Plain path lines: .venv's packages and those of the dependencies' environment it reads
    # (scripts/setup_env.sh) become importable, but their .pth files (the editable lazymem finder among
    # them) are not run.
    dirs = [sysconfig.get_paths()["purelib"], *(p for p in sys.path if p.endswith("site-packages"))]
    (site / "dev_venv.pth").write_text("".join(f"{d}\n" for d in dict.fromkeys(dirs)))
    return py, site


def pip_install(py: Path, *args, env=None) -> str:
    """What `pip install -q` of lazymem alone prints (offline, no build isolation, as in setup_env.sh)."""
    pip = [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index"]
    out = sh(*pip, "--no-build-isolation", *args, cwd=py.parent, env=env)
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def installed(source):
    """(venv, site-packages, what the install printed) of a fresh venv holding a non-editable lazymem;
    .venv's packages on its path."""
    venv = source.parent / "venv"
    py, site = fresh_venv(venv)
    return venv, site, pip_install(py, source)


def outside(tmp_path, venv) -> dict:
    """Environment of a user shell in a directory outside the checkout, the new venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAZYMEM_", "PYTHON", "VIRTUAL_ENV"))}
    return {
        **env,
        "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        "LAZYMEM_CACHE": str(tmp_path / "cache"),
    }


def test_the_installed_package_is_what_runs(installed, tmp_path):
    venv, site, _ = installed
    code = "import sys, lazymem, lazymem.conf; print(lazymem.__file__); print(lazymem.conf.CONF_DIR); "
    code += "print(any('editable' in name for name in sys.modules))"
    module, conf, editable = sh(venv / "bin" / "python", "-c", code, cwd=tmp_path).stdout.split()
    assert Path(module).is_relative_to(site) and Path(conf).is_relative_to(site)
    assert editable == "False"
    # the configs, prompts and the paper's numbers ship in the wheel
    package = site / "lazymem"
    assert (package / "conf" / "config.yaml").exists() and (
        package / "conf" / "paths" / "default.yaml"
    ).exists()
    assert list(package.glob("prompts/*.txt")) and list(package.glob("experiments/*.json"))


def test_building_and_installing_print_nothing(installed, source, tmp_path):
    """A first `make setup` printed about 700 lines of setuptools warnings, one block per conf/ group folder
    ("absent from the `packages` configuration"); the package data is now declared alone. The editable
    install of scripts/setup_env.sh silences setuptools' note on every editable install, and prints nothing
    else. Kind: the real build and installs."""
    assert installed[2] == ""
    py, _ = fresh_venv(tmp_path / "editable")
    quiet = {**os.environ, "PYTHONWARNINGS": "ignore:Editable installation"}
    assert pip_install(py, "-e", source, env=quiet) == ""
    with_note = pip_install(py, "-e", source)
    assert "Editable installation" in with_note and "absent from" not in with_note


def stats_from_outside(tmp_path, env) -> dict:
    """`lazymem task=stats` on the synthetic data, run in `tmp_path` with `env`: its stats.json."""
    sh(
        "lazymem",
        "task=stats",
        "data=synthetic",
        "logger=none",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
        env=env,
    )
    return json.loads((tmp_path / "run" / "stats.json").read_text())


def test_lazymem_runs_stats_from_outside_the_checkout(installed, tmp_path):
    venv, _, _ = installed
    env = outside(tmp_path, venv)
    assert Path(shutil.which("lazymem", path=env["PATH"])) == venv / "bin" / "lazymem"
    stats = stats_from_outside(tmp_path, env)
    assert stats["dataset"] == "synthetic" and stats["questions"] == 14
    info = sh("lazymem", "--info", "searchpath", cwd=tmp_path, env=env).stdout
    assert "pkg://lazymem.conf" in info and "file://" not in info  # the bundled configs only


def test_a_user_config_folder_on_the_search_path(installed, tmp_path):
    venv, _, _ = installed
    mine = tmp_path / "my_conf" / "data" / "mine.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text(
        "defaults:\n  - synthetic\n  - _self_\n\nname: mine\nloader:\n  per_type: 1\n  abstention: 1\n"
    )
    env = {**outside(tmp_path, venv), "LAZYMEM_CONFIG_PATH": str(tmp_path / "my_conf")}
    sh(
        "lazymem",
        "task=stats",
        "data=mine",
        "logger=none",
        f"hydra.run.dir={tmp_path}/a",
        cwd=tmp_path,
        env=env,
    )
    assert json.loads((tmp_path / "a" / "stats.json").read_text())["questions"] == 7  # 6 types + 1 abstention
    assert yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())["data"]["name"] == "mine"
    # the same folder named on the command line instead of the environment
    del env["LAZYMEM_CONFIG_PATH"]
    folder = f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]"
    sh(
        "lazymem",
        "task=stats",
        "data=mine",
        "logger=none",
        folder,
        f"hydra.run.dir={tmp_path}/b",
        cwd=tmp_path,
        env=env,
    )
    assert json.loads((tmp_path / "b" / "stats.json").read_text())["questions"] == 7


def test_shell_completion_of_the_console_script(installed, tmp_path):
    venv, _, _ = installed
    env = outside(tmp_path, venv)
    script = sh("lazymem", "-sc", "install=bash", cwd=tmp_path, env=env).stdout
    assert "complete -o nospace -o default -F hydra_bash_completion lazymem" in script
    env |= {"COMP_LINE": "lazymem retrieval=", "COMP_POINT": "18"}
    choices = sh("lazymem", "-sc", "query=bash", cwd=tmp_path, env=env).stdout.split()
    assert "retrieval=paper_gpu" in choices and "retrieval=hybrid" in choices


def test_the_editable_install_runs_a_task_from_outside_the_checkout(tmp_path):
    """.venv's lazymem (pip install -e, with conf/ and experiments/ mapped in) works from any directory."""
    venv = Path(sys.executable).parent.parent
    env = outside(tmp_path, venv)
    code = "import lazymem.conf as c, lazymem.experiments as e; print(c.CONF_DIR, e.EXPERIMENTS_DIR)"
    conf, experiments = sh(venv / "bin" / "python", "-c", code, cwd=tmp_path, env=env).stdout.split()
    assert (Path(conf), Path(experiments)) == (ROOT / "conf", ROOT / "experiments")
    assert stats_from_outside(tmp_path, env)["questions"] == 14
