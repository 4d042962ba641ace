"""Reading a block of the agent's config key by key (lazymem/agent/config_block.py): each value checked as it
is read, every refusal one ConfigError of one problem that names the key; the keys no one read refused at
the end. lazymem/agent/settings.py's tests read the agent's real blocks through it."""

from __future__ import annotations

import pytest

from lazymem.agent.config_block import Block, finite, show
from lazymem.agent.inputs import Limits
from lazymem.validate import ConfigError


def refusal(read, *args, **kwargs) -> str:
    """The one problem a read refuses with."""
    with pytest.raises(ConfigError) as caught:
        read(*args, **kwargs)
    (problem,) = caught.value.problems
    return problem


def test_keys_are_named_by_their_path_and_unread_ones_are_refused():
    serve = Block({"port": 1, "host": "h", "extra": 0}, "serve")
    assert serve.key("port") == "serve.port" and Block({}, "").key("top") == "top"
    assert serve.integer("port", 0) == 1 and serve.text("host") == "h"
    assert refusal(serve.done) == "serve.extra: unknown key (known: host, port)"
    assert refusal(serve.get, "absent") == "serve.absent: missing (conf/agent/default.yaml sets it)"
    assert refusal(Block, ["x"], "mcp") == "mcp: expected a mapping, got ['x']"
    inner = Block({"store": {"dir": "d"}}, "agent").block("store")
    assert inner.text("dir") == "d" and inner.key("dir") == "agent.store.dir"
    inner.done()  # every key read


def test_each_kind_of_value_names_what_it_expects():
    block = Block(
        {
            "n": True,
            "s": 0,
            "t": 5,
            "flag": "yes",
            "name": " ",
            "level": "LOUD",
            "id": "a b",
            "long": "x" * 20,
        },
        "b",
    )
    assert refusal(block.integer, "n", 1) == "b.n: expected an integer >= 1, got True"  # a bool is no count
    assert refusal(block.integer, "t", 1, 3, why="a reason") == (
        "b.t: expected an integer from 1 to 3 (a reason), got 5"
    )
    assert refusal(block.seconds, "s") == "b.s: expected a number of seconds > 0, got 0"
    assert refusal(block.seconds, "t", most=2, nullable=True) == (
        "b.t: expected a number of seconds > 0 and at most 2 (or null), got 5"
    )
    assert refusal(block.boolean, "flag") == "b.flag: expected true or false, got 'yes'"
    assert (
        refusal(block.text, "name", nullable=True) == "b.name: expected a non-empty string or null, got ' '"
    )
    assert (
        refusal(block.choice, "level", ("info", "debug"))
        == "b.level: expected one of info, debug, got 'LOUD'"
    )
    assert (
        refusal(block.text, "id", spaces=False)
        == "b.id: expected a non-empty string without spaces, got 'a b'"
    )
    limits = Limits(max_id_chars=10)
    assert refusal(block.request_id, "long", limits).startswith(
        "b.long: expected an id as a request's (agent.limits.max_id_chars=10), but "
    )


def test_good_values_come_back_as_read():
    block = Block({"s": 2, "none": None, "level": "INFO", "t": None}, "")
    assert block.seconds("s") == 2.0 and block.seconds("none", nullable=True) is None
    assert block.choice("level", ("info",), fold_case=True) == "info"
    assert block.text("t", nullable=True) is None


def test_finite_and_show():
    assert [finite(v) for v in (3, 2.5, True, "1", float("nan"), float("inf"), 10**400)] == [
        3.0,
        2.5,
        None,
        None,
        None,
        None,
        None,
    ]
    assert show(None) == "null" and show("x") == "'x'"
    assert show("y" * 100) == repr("y" * 100)[:57] + "..." and len(show("y" * 100)) == 60
