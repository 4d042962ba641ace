"""The task contract (lazymem/tasks/contract.py): what generic code asks of a task (whether it counts
questions, resumes itself, its engine's versions, its training files) is the task's own answer. The registry
that finds them: tests/tasks/test_tasks.py."""

from importlib import metadata
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem import tasks
from lazymem.conf import CONF_DIR


def test_what_the_runner_and_the_chain_ask_of_the_tasks():
    declared = {name: tasks.find(name) for name in tasks.NAMES}
    # a chain's stages keep their own question counts; it decides itself what a resumed run reruns
    assert [n for n, t in declared.items() if not t.counts_questions] == ["chain"]
    assert [n for n, t in declared.items() if t.resumes_itself] == ["chain"]
    assert {n: t.training_files for n, t in declared.items() if t.training_files} == {
        "build_rl": ("*.parquet",),
        "build_sft": ("annotations.jsonl", "lazymem_sft*.json"),
    }
    assert sorted(n for n, t in declared.items() if t.versions) == ["train_grpo", "train_sft"]


def fake_venv(root: Path, **versions: str) -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    for name, version in versions.items():
        (site / f"{name}-{version}.dist-info").mkdir(parents=True)
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("#!/bin/false\n")  # never started: versions come from dist-info
    return root


def config(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("config", list(overrides))


def test_the_training_tasks_engines_are_read_from_their_environments(tmp_path):
    venv = fake_venv(tmp_path / "venv", llamafactory="0.9.5")
    sft = config("+experiment=train_sft_cpu", f"train.sft.venv={venv}")
    assert tasks.find("train_sft").versions(sft) == {"llamafactory": "0.9.5"}
    grpo = config("+experiment=train_grpo_cpu", f"train.grpo.python={venv}/bin/python")
    versions = tasks.find("train_grpo").versions
    assert versions(grpo) == {"trl": "absent"}  # the configured engine's packages
    OmegaConf.update(grpo, "train.grpo.engine", None, force_add=True)
    OmegaConf.update(grpo, "train.grpo.python", None)
    both = versions(grpo)  # no engine named: every bundled engine's, here from this environment
    assert set(both) == {"trl", "verl"} and both["trl"] == metadata.version("trl")
