"""lazymem.data (the package's __init__): load_dataset with the shipped data configs, the stratified split
computed or read from a split file, evaluation-only benchmarks, split_data, and the DataErrors of unknown
splits and bad split files."""

import json

import pytest
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.data import DataError, load_dataset, select_split, split_data, synthetic, whole_as_test
from lazymem.data.io import sha256_file

FRACTIONS = (0.72, 0.08, 0.2)


def data_cfg(name: str, seed: int = 0, **over):
    """conf/data/NAME.yaml as the job sees it (under a root with `seed`), with top-level keys overridden."""
    root = OmegaConf.create({"seed": seed, "data": OmegaConf.load(CONF_DIR / "data" / f"{name}.yaml")})
    root.data.merge_with(over)
    return root.data


def thirty():
    """30 synthetic questions, five of each LongMemEval type, no abstention."""
    return synthetic.load(per_type=5, abstention=0, sessions=3, turns=2)


def write_lme(tmp_path, **kw):
    """A LongMemEval-format file, generated: the real loader reads it through conf/data/longmemeval.yaml."""
    path = tmp_path / "lme.json"
    records = synthetic.generate(
        **({"per_type": 2, "abstention": 1, "sessions": 3, "turns": 2, "seed": 1} | kw)
    )
    path.write_text(json.dumps(records))
    return path, [r["question_id"] for r in records]


def test_load_dataset_instantiates_the_configured_loader_with_its_options():
    ds = load_dataset(data_cfg("synthetic", seed=3))
    assert ds.name == "synthetic"
    assert len(ds.questions) == 2 * 6 + 2  # per_type: 2 over six types, abstention: 2
    assert [q.id for q in ds.questions] == [q.id for q in synthetic.load(seed=3).questions]
    smaller = load_dataset(data_cfg("synthetic", loader={"per_type": 1, "abstention": 0}))
    assert len(smaller.questions) == 6


def test_limit_keeps_the_first_questions_and_only_their_histories():
    full = load_dataset(data_cfg("synthetic"))
    ds = load_dataset(data_cfg("synthetic", limit=3))
    assert [q.id for q in ds.questions] == [q.id for q in full.questions[:3]]
    assert set(ds.histories) == {q.history_id for q in ds.questions}
    assert ds.source["limit"] == 3
    assert "limit" not in full.source


def test_computed_split_partitions_the_questions_stratified_by_type():
    ds = thirty()
    parts = {name: select_split(ds, name, None, FRACTIONS, 42) for name in ("train", "val", "test")}
    ids = {name: [q.id for q in sub.questions] for name, sub in parts.items()}
    # 30 * (0.72, 0.08, 0.2) = 21.6 / 2.4 / 6: the one left over goes to the largest remainder (train)
    assert {name: len(v) for name, v in ids.items()} == {"train": 22, "val": 2, "test": 6}
    assert sorted(ids["train"] + ids["val"] + ids["test"]) == sorted(q.id for q in ds.questions)
    # val's 2 go to the two types left with the most questions after train took 3 or 4 of each five
    # (train's 4 left-over places went to the four types whose names sort last)
    val_types = sorted(q.type for q in parts["val"].questions)
    assert val_types == ["knowledge-update", "multi-session"]
    assert sorted(q.type for q in parts["test"].questions) == sorted({q.type for q in ds.questions})
    for name, sub in parts.items():
        assert sub.source["split"] == name and sub.source["split_file"] is None
        assert set(sub.histories) == {q.history_id for q in sub.questions}
    assert "split" not in ds.source  # the source dataset is left as it was


def test_split_selection_is_deterministic_for_a_seed_and_varies_with_it():
    ds = thirty()

    def test_ids(seed):
        return [q.id for q in select_split(ds, "test", None, FRACTIONS, seed).questions]

    assert test_ids(42) == test_ids(42)
    assert len({tuple(test_ids(seed)) for seed in range(6)}) > 1


def test_split_keeps_the_file_order_of_questions():
    ds = thirty()
    order = [q.id for q in ds.questions]
    picked = [q.id for q in select_split(ds, "train", None, FRACTIONS, 42).questions]
    assert picked == sorted(picked, key=order.index)


def test_unknown_split_name_is_a_data_error_on_the_split_field():
    ds = thirty()
    with pytest.raises(DataError) as err:
        select_split(ds, "dev", None, FRACTIONS, 42)
    assert (err.value.path, err.value.record, err.value.field) == ("<data.split>", None, "split")
    assert "unknown split 'dev'; use one of ('train', 'val', 'test')" in str(err.value)
    with pytest.raises(DataError, match="unknown split 'validation'") as err:
        select_split(ds, "validation", "splits/mine.json", FRACTIONS, 42)
    assert err.value.path == "splits/mine.json"  # the split file the name was looked up for
    with pytest.raises(DataError, match="unknown split 'dev'"):
        load_dataset(data_cfg("synthetic", split="dev"))


def test_split_file_selects_exactly_its_ids(tmp_path):
    ds = thirty()
    ids = [q.id for q in ds.questions]
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"train": ids[5:], "val": [ids[3], ids[0]], "test": ids[1:3]}))
    val = select_split(ds, "val", str(split_file), FRACTIONS, 42)
    assert [q.id for q in val.questions] == [ids[0], ids[3]]  # dataset order, not the file's
    assert val.source["split"] == "val" and val.source["split_file"] == str(split_file)
    # the split file wins over the computed split, and load_dataset reads it from data.split_file
    loaded = load_dataset(
        data_cfg(
            "synthetic", split="test", split_file=str(split_file), loader={"per_type": 5, "abstention": 0}
        )
    )
    assert [q.id for q in loaded.questions] == ids[1:3]


def test_missing_split_file_says_how_to_make_one(tmp_path):
    path = tmp_path / "nowhere.json"
    with pytest.raises(DataError) as err:
        select_split(thirty(), "train", str(path), FRACTIONS, 42)
    assert err.value.path == str(path) and err.value.field is None
    assert str(err.value) == f"file {path}: no such split file (make one with task=split)"


@pytest.mark.parametrize(
    "text",
    [
        "not json at all",
        json.dumps({"train": [], "test": []}),
        json.dumps([["syn000"]]),
        json.dumps({"val": 5}),
        json.dumps({"val": "syn000"}),
        json.dumps({"val": [1, 2]}),
    ],
    ids=["not-json", "no-val-list", "a-json-list", "a-number", "a-string", "not-ids"],
)
def test_malformed_split_file_names_the_file_and_the_split(tmp_path, text):
    path = tmp_path / "split.json"
    path.write_text(text)
    with pytest.raises(DataError, match=r"not a split file with a 'val' list \(.+\)$") as err:
        select_split(thirty(), "val", str(path), FRACTIONS, 42)
    assert err.value.path == str(path) and err.value.field == "val" and err.value.record is None


def test_split_file_ids_absent_from_the_dataset_are_counted_and_the_first_named(tmp_path):
    ds = thirty()
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"test": [ds.questions[0].id, "gone_1", "gone_2"]}))
    with pytest.raises(DataError) as err:
        select_split(ds, "test", str(path), FRACTIONS, 42)
    assert (err.value.path, err.value.record, err.value.field) == (str(path), "gone_1", "test")
    assert str(err.value).endswith(f"2 ids of this split are not in {ds.source['path']}")


def test_evaluation_only_benchmark_keeps_every_question_as_test():
    ds = thirty()
    all_ids = [q.id for q in ds.questions]
    same = whole_as_test(ds, "test")
    assert [q.id for q in same.questions] == all_ids
    assert same.source["split"] == "test" and same.source["split_file"] is None
    loaded = load_dataset(data_cfg("synthetic", split="test", test_only=True))
    assert len(loaded.questions) == 14 and loaded.source["split"] == "test"


@pytest.mark.parametrize("split", ["train", "val"])
def test_evaluation_only_benchmark_refuses_train_and_val(split):
    with pytest.raises(DataError) as err:
        load_dataset(data_cfg("synthetic", split=split, test_only=True))
    assert (err.value.path, err.value.field) == ("<data.split>", "split")
    assert str(err.value).endswith(f"synthetic has no '{split}' split: it is evaluation only (split=test)")


def test_longmemeval_config_reads_the_file_at_data_path_then_splits_and_limits(tmp_path):
    path, ids = write_lme(tmp_path)
    ds = load_dataset(data_cfg("longmemeval", path=str(path)))
    assert ds.name == "longmemeval" and [q.id for q in ds.questions] == ids
    assert ds.source["path"] == str(path) and ds.source["sha256"] == sha256_file(path)
    test = load_dataset(data_cfg("longmemeval", path=str(path), split="test"))
    limited = load_dataset(data_cfg("longmemeval", path=str(path), split="test", limit=2))
    assert [q.id for q in limited.questions] == [q.id for q in test.questions][:2]  # limit after the split
    assert limited.source["split"] == "test" and limited.source["limit"] == 2


def test_loader_errors_reach_the_caller_as_data_errors(tmp_path):
    absent = tmp_path / "absent.json"
    with pytest.raises(DataError, match="no such file") as err:  # not hydra's InstantiationException
        load_dataset(data_cfg("longmemeval", path=str(absent)))
    assert err.value.path == str(absent)


def test_split_data_with_a_path_reads_that_whole_file(tmp_path):
    path, ids = write_lme(tmp_path)
    data = data_cfg("longmemeval", split="test", split_file="old.json", limit=1)
    train = split_data(data, "train", path)
    assert (
        train.path == str(path) and train.split is None and train.split_file is None and train.limit is None
    )
    assert train.split_seed == data.split_seed and train.loader.hub_file == data.loader.hub_file
    assert [q.id for q in load_dataset(train).questions] == ids  # no split of a split file


def test_split_data_without_a_path_selects_the_split_of_the_configured_data(tmp_path):
    path, _ = write_lme(tmp_path)
    data = data_cfg("longmemeval", path=str(path), split="test", limit=1)
    val = split_data(data, "val", None)
    assert val.split == "val" and val.limit is None and val.path == str(path)
    assert data.split == "test" and data.limit == 1  # the caller's config is not changed
    loaded = load_dataset(val)
    expected = select_split(load_dataset(data_cfg("longmemeval", path=str(path))), "val", None, FRACTIONS, 42)
    assert [q.id for q in loaded.questions] == [q.id for q in expected.questions]
    assert loaded.source["split"] == "val"
