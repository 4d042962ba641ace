"""Fingerprints: a stage's config composed in this process, its engine, its inputs; a change anywhere
changes the digest, and an unchanged stage gets the same digest in another process."""

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from lazymem.chain.fingerprint import changes, composer, config_digest, engine, fingerprint, stage_config
from lazymem.validate import ConfigError

from helpers import ROOT

STATS = ["task=stats", "data.loader.per_type=1"]
DIGEST = (
    "from lazymem.chain.fingerprint import composer, config_digest, stage_config\n"
    "with composer() as c: print(config_digest(stage_config(c, 's', {ov!r})[1]))"
)


def digest(compose, overrides):
    return config_digest(stage_config(compose, "s", overrides)[1])


def test_a_changed_override_changes_the_config_digest_and_free_keys_do_not():
    with composer() as compose:
        base = digest(compose, STATS)
        assert digest(compose, [*STATS, "data.loader.per_type=2"]) != base
        for free in ("resume=true", "logger=none", "paths.cache=/elsewhere", "++train.grpo.ray_address=x:1"):
            assert digest(compose, [*STATS, free]) == base, free


def test_the_digest_is_the_same_in_another_process():
    with composer() as compose:
        here = digest(compose, STATS)
    code = DIGEST.format(ov=STATS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == here, out.stderr[-2000:]


def test_a_bad_override_is_a_config_error_naming_the_stage():
    with (
        composer() as compose,
        pytest.raises(ConfigError, match="chain.stages.s: its config does not compose"),
    ):
        stage_config(compose, "s", ["data=nope"])


def test_the_engine_is_what_the_stages_task_names_else_lazymem():
    cfg = OmegaConf.create({"task": "train_sft"})
    assert engine(cfg, lambda c: {"llamafactory": f"0.9.5 for {c.task}"}) == {
        "llamafactory": "0.9.5 for train_sft"
    }
    assert set(engine(cfg, None)) == {"lazymem"}


def test_changes_name_the_part_that_moved():
    a = fingerprint("c1", {"trl": "1.15.0"}, {"build": "d1", "given": {"path": "/m", "mtime": 1.0}})
    assert changes(a, json.loads(json.dumps(a))) == []
    b = fingerprint("c2", {"trl": "1.16.0"}, {"build": "d2", "given": {"path": "/m", "mtime": 1.0}})
    assert changes(a, b) == ["config", "engine (trl 1.15.0 -> 1.16.0)", "input build"]
    assert a["digest"] != b["digest"]
    assert (
        fingerprint("c1", {"trl": "1.15.0"}, {"build": "d2", "given": a["inputs"]["given"]})["digest"]
        != a["digest"]
    )
