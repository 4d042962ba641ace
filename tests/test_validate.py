"""Config validation (lazymem/validate.py) on configs composed from conf/ as the CLI composes them."""

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.validate import ConfigError, problems, validate


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["+experiment=quickstart", *overrides])


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_shipped_experiments_are_valid(experiment):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert problems(compose("config", overrides=[f"+experiment={experiment}"])) == []


@pytest.mark.parametrize(
    "override, expected",
    [
        ("w=-1", "w = -1: must be an integer >= 0"),
        ("w=1.5", "w = 1.5: must be an integer >= 0"),
        ("retrieval.n=0", "retrieval.n = 0: must be an integer >= 1"),
        ("methods.rag_top20.top_k=0", "methods.rag_top20.top_k = 0: must be an integer >= 1"),
        ("max_error_rate=2", "max_error_rate = 2: must be a number >= 0 and <= 1"),
        ("latency.repeats=0", "latency.repeats = 0: must be an integer >= 1"),
        (
            "llm.common.backend=nosuch",
            "llm.roles.answer.backend = 'nosuch': allowed values are llamacpp, vllm",
        ),
        (
            "llm.common.decoding.max_tokens=0",
            "llm.roles.memory.decoding.max_tokens = 0: must be an integer >= 1",
        ),
        (
            "construct.invalid.fallback=keep",
            "construct.invalid.fallback = 'keep': allowed values are none, raw",
        ),
        ("retrieval.retrievers.bm25.backend=lucene", "retrieval.retrievers.bm25.backend = 'lucene': allowed"),
    ],
)
def test_each_bad_value_is_named_with_what_is_allowed(override, expected):
    found = problems(composed(override))
    assert any(expected in p for p in found), found


def test_method_given_as_a_plain_value_names_the_key_and_the_presets():
    (problem,) = problems(composed("+methods.x=nosuch"))
    assert problem.startswith(
        "methods.x = 'nosuch' is not a method config: add one with +method@methods.x=NAME"
    )
    assert "lazymem" in problem and "rag_top20" in problem


def test_unknown_method_key_and_target_are_named():
    found = problems(composed("+methods.lazymem.radious=3", "methods.rag_top20._target_=foo.Bar"))
    assert any(p.startswith("methods.lazymem: unknown key(s) radious;") and "radius" in p for p in found), (
        found
    )
    assert any(p.startswith("methods.rag_top20._target_ = 'foo.Bar' cannot be imported") for p in found)


def test_a_method_of_your_own_is_accepted_and_a_non_method_is_named():
    ok = problems(composed("methods.rag_top20._target_=lazymem.methods.rag.RAG"))
    assert ok == []
    found = problems(composed("methods.rag_top20._target_=lazymem.construct.windows.Window"))
    assert any("is not a method: it has no async build" in p for p in found), found


def test_a_methods_own_construct_policy_is_checked_once():
    own = "methods.lazymem.construct={structured:true,invalid:{fallback:keep,retries:0}}"
    found = problems(composed(own))
    assert [p for p in found if "fallback" in p] == [
        "methods.lazymem.construct.invalid.fallback = 'keep': allowed values are none, raw, drop"
    ]
    shared = problems(composed("construct.invalid.fallback=keep"))  # inherited by every method: one report
    assert [p for p in shared if "fallback" in p] == [
        "construct.invalid.fallback = 'keep': allowed values are none, raw, drop"
    ]


def test_validate_reports_every_problem_at_once():
    with pytest.raises(ConfigError) as e:
        validate(composed("latency.warmup=-1", "retrieval.n=0"))
    assert len(e.value.problems) == 2 and str(e.value).startswith("invalid config:\n  - ")
