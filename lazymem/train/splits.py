"""The data of one split for the training-data tasks (build_sft, build_rl).

The split comes either from `data.path` (the paper's 360/40/100 split computed on the full file, or a
split file) or from a file that holds exactly that split's questions, such as the shared
longmemeval_oracle_{train,val}.json: a split computed on such a file would split it again.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def split_data(data, split: str, path: str | None):
    """`data` for split `split`: the whole file at `path` when given, else `data.split = split`."""
    if path:
        return OmegaConf.merge(data, {"path": str(path), "split": None, "split_file": None, "limit": None})
    return OmegaConf.merge(data, {"split": split, "limit": None})
