"""Run-directory rules (lazymem/rundir.py): no overwriting, resume only with the same results-config,
a status that says what happened to the questions."""

import json
from collections import Counter

import pytest
from omegaconf import OmegaConf

from lazymem.rundir import RunDirError, check_run_dir, outcome, over_budget, result_changes, write_config


def cfg(**over):
    base = {
        "w": 2,
        "resume": False,
        "paths": {"cache": "/a"},
        "llm": {"common": {"concurrency": 1, "model": "m"}},
    }
    return OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(over))


def test_results_keys_are_named_free_keys_are_not():
    stored = OmegaConf.to_container(cfg())
    new = OmegaConf.to_container(
        cfg(w=0, paths={"cache": "/b"}, llm={"common": {"concurrency": 4, "seed": 1}})
    )
    assert result_changes(stored, new) == ["llm.common.seed: '<absent>' -> 1", "w: 2 -> 0"]


def test_a_fresh_or_empty_directory_is_fine(tmp_path):
    check_run_dir(tmp_path / "new", cfg())
    (tmp_path / ".hydra").mkdir()  # what Hydra writes is not a run
    check_run_dir(tmp_path, cfg())


def test_an_earlier_run_is_refused_without_resume_and_checked_with_it(tmp_path):
    write_config(cfg(), tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"status": "ok"}))
    with pytest.raises(RunDirError, match=r"already holds a run \(status ok\); continue it with resume=true"):
        check_run_dir(tmp_path, cfg())
    with pytest.raises(RunDirError, match=r"(?s)resume=true refused.*  - w: 2 -> 0"):
        check_run_dir(tmp_path, cfg(resume=True, w=0))
    check_run_dir(tmp_path, cfg(resume=True, llm={"common": {"concurrency": 8}}))
    # a task that resumes itself (task=chain: per stage) takes any config; a run without resume, never
    check_run_dir(tmp_path, cfg(resume=True, w=0), resumes_itself=True)
    with pytest.raises(RunDirError, match="already holds a run"):
        check_run_dir(tmp_path, cfg(w=0), resumes_itself=True)


def test_status_follows_the_records():
    assert outcome(None) == ("ok", None)
    assert outcome(Counter(ok=3, not_applicable=1))[0] == "ok"
    status, q = outcome(Counter(ok=3, error=1))
    assert status == "partial" and q == {"ok": 3, "not_applicable": 0, "errors": 1, "error_rate": 0.25}
    assert outcome(Counter(error=2, not_applicable=1))[0] == "failed"


def test_over_budget():
    partial = {"status": "partial", "questions": {"error_rate": 0.25, "max_error_rate": 0.0}}
    assert over_budget(partial)
    partial["questions"]["max_error_rate"] = 0.3
    assert not over_budget(partial)
    assert over_budget({"status": "interrupted"}) and over_budget({"status": "failed"})
    assert not over_budget({"status": "ok"})
