"""The test-id guard reads a training stage's data back and names any test question in it."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from lazymem.chain.guards import held_out_ids, leaks

SFT_FILES = ("annotations.jsonl", "lazymem_sft*.json")  # as task=build_sft declares them
RL_FILES = ("*.parquet",)  # task=build_rl's


def split_dir(tmp_path):
    (tmp_path / "split").mkdir()
    split = {"train": ["t1", "t2"], "val": ["v1"], "test": ["x1", "x2"]}
    (tmp_path / "split" / "split.json").write_text(json.dumps(split))
    return tmp_path / "split"


def sft_dir(tmp_path, ids):
    run = tmp_path / "build_sft"
    run.mkdir()
    rows = [{"messages": [], "question_id": i} for i in ids]
    (run / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "lazymem_sft.json").write_text(json.dumps(rows[:1]))
    return run


def rl_dir(tmp_path, ids):
    run = tmp_path / "build_rl"
    run.mkdir()
    info = [{"split": "train", "index": n, "question_id": i} for n, i in enumerate(ids)]
    pq.write_table(pa.table({"prompt": ["p"] * len(ids), "extra_info": info}), run / "train.parquet")
    return run


def test_the_test_ids_of_a_split_file_or_run_dir(tmp_path):
    split = split_dir(tmp_path)
    assert held_out_ids(split) == held_out_ids(split / "split.json") == {"x1", "x2"}


def test_clean_training_data_passes(tmp_path):
    split = split_dir(tmp_path)
    assert leaks(sft_dir(tmp_path, ["t1", "v1"]), split, SFT_FILES) is None
    assert leaks(rl_dir(tmp_path, ["t2", "t1"]), split, RL_FILES) is None


def test_a_test_id_in_sft_or_rl_data_is_named_with_its_file(tmp_path):
    split = split_dir(tmp_path)
    message = leaks(sft_dir(tmp_path, ["t1", "x2"]), split, SFT_FILES)
    assert "annotations.jsonl: 1 (x2)" in message and "lazymem_sft.json" not in message
    message = leaks(rl_dir(tmp_path, ["x1", "t1", "x2"]), split, RL_FILES)
    assert "train.parquet: 2 (x1, x2)" in message and str(split) in message


def test_only_the_files_the_stages_task_declares_are_read(tmp_path):
    split = split_dir(tmp_path)
    assert leaks(sft_dir(tmp_path, ["x1"]), split, RL_FILES) is None
    assert leaks(rl_dir(tmp_path, ["x1"]), split, ()) is None
