"""Benchmarks behind one schema: LongMemEval, LoCoMo and the synthetic default.

`load_dataset(cfg.data)` instantiates the configured loader, then selects a split and a limit.
"""

from __future__ import annotations

import json
from pathlib import Path

from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf

from lazymem.data.schema import DataError, Dataset, History, Message, Question
from lazymem.data.stratified_split import SPLITS, make_split

__all__ = [
    "Dataset",
    "DataError",
    "History",
    "Message",
    "Question",
    "load_dataset",
    "select_split",
    "split_data",
]


def load_dataset(data: DictConfig) -> Dataset:
    # Called directly rather than through hydra's instantiate, which would wrap a DataError.
    options = OmegaConf.to_container(data.loader, resolve=True)
    ds = get_method(options.pop("_target_"))(**options)
    if data.get("split") and data.get("test_only"):
        ds = whole_as_test(ds, data.split)
    elif data.get("split"):
        ds = select_split(ds, data.split, data.get("split_file"), data.split_fractions, data.split_seed)
    if data.get("limit") is not None:
        ds = ds.subset([q.id for q in ds.questions[: int(data.limit)]])
        ds.source["limit"] = int(data.limit)
    return ds


def split_data(data: DictConfig, split: str, path: str | None) -> DictConfig:
    """`data` for split `split` of the training-data tasks (build_sft, build_rl): the whole file at `path`
    when given (a file holding exactly that split's questions, such as the shared
    longmemeval_oracle_{train,val}.json, which a computed split would split again), else `data.split = split`
    (the paper's 360/40/100 split of the full file, or a split file)."""
    if path:
        return OmegaConf.merge(data, {"path": str(path), "split": None, "split_file": None, "limit": None})
    return OmegaConf.merge(data, {"split": split, "limit": None})


def whole_as_test(ds: Dataset, name: str) -> Dataset:
    """A benchmark that is never trained on (LoCoMo): every selected question is a test question, so
    `split: test` (what the paper's experiments ask of any benchmark) keeps them all; train/val do not
    exist."""
    if name != "test":
        raise DataError(
            "<data.split>",
            None,
            "split",
            f"{ds.name} has no '{name}' split: it is evaluation only (split=test)",
        )
    ds.source.update(split="test", split_file=None)
    return ds


def select_split(ds: Dataset, name: str, split_file: str | None, fractions, seed: int) -> Dataset:
    """The questions of split `name`, from `split_file` when given, else computed from this file."""
    if name not in SPLITS:
        raise DataError(
            split_file or "<data.split>", None, "split", f"unknown split '{name}'; use one of {SPLITS}"
        )
    if split_file:
        path = Path(split_file)
        try:
            ids = json.loads(path.read_text())[name]
        except FileNotFoundError:
            raise DataError(path, None, None, "no such split file (make one with task=split)") from None
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise DataError(path, None, name, f"not a split file with a '{name}' list ({e})") from None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            # a string would be read character by character, a number would fail below with a TypeError
            found = type(ids).__name__
            raise DataError(path, None, name, f"not a split file with a '{name}' list (found a {found})")
        known = {q.id for q in ds.questions}
        missing = [i for i in ids if i not in known]
        if missing:
            raise DataError(
                path, missing[0], name, f"{len(missing)} ids of this split are not in {ds.source['path']}"
            )
    else:
        ids = make_split(ds.questions, fractions, seed)[0][name]
    sub = ds.subset(ids)
    sub.source.update(split=name, split_file=split_file)
    return sub
