"""registry.named_class: a registered name or a subclass's import path, and the ValueError naming the config
key and what is allowed otherwise."""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import pytest

from lazymem.llm.backends import BACKENDS, Backend, LlamaCppBackend, VllmBackend
from lazymem.registry import named_class

REGISTERED = {"plain": dict, "ordered": OrderedDict}
ALLOWED = "allowed values are plain, ordered, or the import path of a dict class"


def test_a_registered_name_gives_its_class():
    assert named_class("ordered", REGISTERED, dict, "kind") is OrderedDict
    assert named_class("vllm", BACKENDS, Backend, "backend") is VllmBackend


def test_an_import_path_gives_the_subclass_it_names():
    assert named_class("collections.defaultdict", REGISTERED, dict, "kind") is defaultdict
    found = named_class("lazymem.llm.backends.LlamaCppBackend", BACKENDS, Backend, "backend")
    assert found is LlamaCppBackend


def test_the_base_class_itself_is_accepted_by_its_path():
    assert named_class("builtins.dict", REGISTERED, dict, "kind") is dict


def test_a_registered_name_wins_over_an_import_path_of_the_same_spelling():
    assert named_class("collections.OrderedDict", {"collections.OrderedDict": dict}, dict, "kind") is dict


@pytest.mark.parametrize("value", ["nope", "", None, 3, ["plain"]])
def test_an_unknown_name_or_a_non_string_lists_the_allowed_values(value):
    with pytest.raises(ValueError) as err:
        named_class(value, REGISTERED, dict, "data.kind")
    assert str(err.value) == f"data.kind = {value!r}: {ALLOWED}"


def test_the_allowed_values_follow_the_registry_order():
    with pytest.raises(
        ValueError,
        match=r"allowed values are llamacpp, vllm, endpoint, auto, or the import path of a Backend class$",
    ):
        named_class("llama", BACKENDS, Backend, "llm.common.backend")


def test_a_module_that_cannot_be_imported_is_named_with_the_import_error():
    with pytest.raises(ValueError) as err:
        named_class("no_such_module_xyz.Thing", REGISTERED, dict, "kind")
    assert str(err.value) == (
        "kind = 'no_such_module_xyz.Thing' cannot be imported (No module named 'no_such_module_xyz'); "
        + ALLOWED
    )


def test_a_missing_attribute_is_named_with_the_import_error():
    with pytest.raises(ValueError) as err:
        named_class("collections.NoSuchDict", REGISTERED, dict, "kind")
    assert str(err.value) == (
        "kind = 'collections.NoSuchDict' cannot be imported "
        "(module 'collections' has no attribute 'NoSuchDict'); " + ALLOWED
    )


@pytest.mark.parametrize("path", ["collections.deque", "os.path.join", "math.pi"])
def test_an_import_path_that_is_not_a_subclass_names_the_base(path):
    """A class of another family, a function and a constant are all refused."""
    with pytest.raises(ValueError) as err:
        named_class(path, REGISTERED, dict, "kind")
    assert str(err.value) == f"kind = {path!r} is not a subclass of builtins.dict"


def test_the_base_is_named_by_its_module_and_class():
    with pytest.raises(ValueError, match=r"is not a subclass of lazymem\.llm\.backends\.Backend$"):
        named_class("collections.OrderedDict", BACKENDS, Backend, "backend")
