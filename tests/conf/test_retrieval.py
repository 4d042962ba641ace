"""Every conf/retrieval preset composes with Hydra and instantiates to the intended components."""

import re

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.data.schema import History, Message
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.dense import DenseRetriever, SentenceEncoder
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.retrieval.hybrid import HybridRetriever
from lazymem.retrieval.rerank import FlagReranker, NoReranker

CONF = CONF_DIR
PRESETS = ["hybrid", "bm25", "dense", "paper_gpu", "hybrid_tuned"]
# every retrieval config file: the presets and the components they compose (retriever/, fusion/, reranker/)
RETRIEVAL_FILES = sorted(str(p.relative_to(CONF / "retrieval")) for p in (CONF / "retrieval").rglob("*.yaml"))


def compose_preset(name, *overrides):
    # No config_name: compose only the retrieval and paths groups, whatever conf/config.yaml holds.
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        extra = ["+placement=none"] if name == "paper_gpu" else []  # it reads the GPU plan's devices
        return compose(overrides=[f"+retrieval={name}", "+paths=default", *extra, *overrides]).retrieval


def flat(node, prefix=""):
    out = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


# The resolved hybrid preset as it was when every preset still spelled out its components in full; the
# other presets as their differences to it. Composing from per-component files must not change them.
HYBRID = {
    "_target_": "lazymem.retrieval.hybrid.HybridRetriever",
    "n": 50,
    "rerank_candidates": None,
    "max_cached_indexes": 16,
    "parallel": False,
    "fusion._target_": "lazymem.retrieval.fusion.RRF",
    "fusion.k": 60,
    "fusion.depth.bm25": 100,
    "fusion.depth.dense": 100,
    "fusion.weights.bm25": 1.0,
    "fusion.weights.dense": 1.0,
    "reranker._target_": "lazymem.retrieval.rerank.NoReranker",
    "retrievers.bm25._target_": "lazymem.retrieval.bm25.BM25Retriever",
    "retrievers.bm25.backend": "bm25s",
    "retrievers.bm25.k1": 1.5,
    "retrievers.bm25.b": 0.75,
    "retrievers.bm25.method": "lucene",
    "retrievers.bm25.template": "{text}",
    "retrievers.bm25.lowercase": True,
    "retrievers.bm25.stopwords": "en",
    "retrievers.bm25.stemmer": None,
    "retrievers.bm25.token_pattern": r"(?u)\b\w+\b",
    "retrievers.dense._target_": "lazymem.retrieval.dense.DenseRetriever",
    "retrievers.dense.template": "{text}",
    "retrievers.dense.query_template": "{query}",
    "retrievers.dense.commit_every": 256,
    "retrievers.dense.encoder._target_": "lazymem.retrieval.dense.SentenceEncoder",
    "retrievers.dense.encoder.model": "bundled:all-minilm-l6-v2",
    "retrievers.dense.encoder.device": "auto",
    "retrievers.dense.encoder.batch_size": 64,
    "retrievers.dense.encoder.max_seq_length": None,
    "retrievers.dense.encoder.offline": True,
    "retrievers.dense.encoder.trust_remote_code": False,
    "retrievers.dense.encoder.model_kwargs": {},
    "retrievers.dense.encoder.cache_tag": "",
    "retrievers.dense.cache._target_": "lazymem.retrieval.embed_cache.EmbeddingCache",
    "retrievers.dense.cache.dir": "/cache/embeddings",
}
QWEN3_QUERY = (
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:{query}"
)
# preset -> (key prefixes of HYBRID it lacks, keys it sets differently or adds)
DIFFERENCES = {
    "hybrid": ((), {}),
    "hybrid_tuned": ((), {"retrievers.bm25.template": "{time} {role}: {text}"}),
    # one retriever: the hybrid with the other switched off (its fusion entries stay, unused)
    "bm25": (("retrievers.dense.",), {"retrievers.dense": None, "fusion.depth.bm25": None}),
    "dense": (("retrievers.bm25.",), {"retrievers.bm25": None, "fusion.depth.dense": None}),
    "paper_gpu": (
        ("retrievers.dense.encoder.model_kwargs",),
        {
            "parallel": True,
            "retrievers.bm25.backend": "rank_bm25",
            "retrievers.dense.query_template": QWEN3_QUERY,
            "retrievers.dense.encoder.model": "Qwen/Qwen3-Embedding-8B",
            "retrievers.dense.encoder.batch_size": 16,
            "retrievers.dense.encoder.max_seq_length": 8192,
            "retrievers.dense.encoder.model_kwargs.dtype": "bfloat16",
            "reranker._target_": "lazymem.retrieval.rerank.FlagReranker",
            "reranker.model": "BAAI/bge-reranker-v2-m3",
            "reranker.use_fp16": True,
            "reranker.batch_size": 32,
            "reranker.max_length": 1024,
            "reranker.normalize": False,
            "reranker.devices": None,
            "reranker.template": "{text}",
            "reranker.offline": True,
        },
    ),
}


@pytest.mark.parametrize("name", PRESETS)
def test_presets_resolve_as_before_they_were_composed(name, monkeypatch):
    monkeypatch.setenv("LAZYMEM_CACHE", "/cache")
    for var in ("LAZYMEM_QWEN3_EMBEDDING_8B", "LAZYMEM_BGE_RERANKER_V2_M3"):
        monkeypatch.delenv(var, raising=False)
    dropped, changed = DIFFERENCES[name]
    expected = {k: v for k, v in HYBRID.items() if not k.startswith(dropped)} | changed
    assert flat(OmegaConf.to_container(compose_preset(name), resolve=True)) == expected


def test_hybrid_rerank_is_the_cpu_default_plus_the_trained_cross_encoder(monkeypatch):
    monkeypatch.setenv("LAZYMEM_MINILM_RERANKER", "/runs/rr/reranker")
    loo, rerank = (
        flat(OmegaConf.to_container(compose_preset(n), resolve=True)) for n in ("hybrid_loo", "hybrid_rerank")
    )
    changed = {k for k in loo.keys() | rerank.keys() if loo.get(k) != rerank.get(k)}
    assert {k for k in changed if not k.startswith("reranker.")} == {"rerank_candidates"}
    assert rerank["rerank_candidates"] == 100 and rerank["reranker.model"] == "/runs/rr/reranker"
    assert rerank["reranker._target_"] == "lazymem.retrieval.rerank.CrossEncoderReranker"
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        trained = compose("config", overrides=["+experiment=train_reranker_cpu"]).reranker_train
    assert (rerank["reranker.template"], rerank["reranker.max_length"]) == (
        trained.template,
        trained.max_length,
    )


def test_a_component_swaps_from_the_command_line():
    cfg = compose_preset("hybrid", "retrieval/reranker=bge_m3")
    assert cfg.reranker._target_ == "lazymem.retrieval.rerank.FlagReranker"
    cfg = compose_preset("hybrid", "retrieval/retriever@retrieval.retrievers.dense=qwen3_embedding_8b")
    assert cfg.retrievers.dense.encoder.batch_size == 16 and cfg.retrievers.bm25.backend == "bm25s"


def history():
    texts = [
        "Our anniversary dinner is booked at the Thai place.",
        "I should renew my passport soon.",
        "The passport office needs two photos.",
        "Dinner was wonderful, the curry especially.",
    ]
    return History("h", [Message(i, "s", "2023/03/01", "user", t) for i, t in enumerate(texts)])


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYMEM_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("name", ["hybrid", "bm25", "dense"])
def test_cpu_presets_instantiate_and_search(name, cache_env):
    cfg = compose_preset(name)
    assert cfg.n == 50
    retriever = instantiate(cfg)
    assert isinstance(retriever, HybridRetriever) and isinstance(retriever.reranker, NoReranker)
    expected = {"hybrid": {"bm25", "dense"}, "bm25": {"bm25"}, "dense": {"dense"}}[name]
    assert set(retriever.retrievers) == expected
    if "dense" in retriever.retrievers:
        dense = retriever.retrievers["dense"]
        assert isinstance(dense, DenseRetriever) and dense.encoder.model_spec == "bundled:all-minilm-l6-v2"
        assert dense.cache.path == cache_env / "embeddings" / "embeddings.sqlite"
    result = retriever.index(history()).search("When do I need to renew my passport?")
    assert result.indices[0] in (1, 2)
    # a timing per stage of this retrieval: its own retrievers by name, then fusion and rerank
    assert set(result.timings) == {*expected, "fusion", "rerank", "total"} == {*retriever.stages, "total"}


def test_paths_cache_wins_over_the_env(tmp_path):
    cfg = compose_preset("hybrid", f"paths.cache={tmp_path / 'root'}")
    retriever = instantiate(cfg)
    assert retriever.retrievers["dense"].cache.path == tmp_path / "root" / "embeddings" / "embeddings.sqlite"


def test_bm25_backend_override(cache_env):
    retriever = instantiate(compose_preset("bm25", "retrieval.retrievers.bm25.backend=rank_bm25"))
    assert retriever.retrievers["bm25"].backend == "rank_bm25"
    assert retriever.index(history()).search("passport photos").indices[0] == 2


def test_paper_gpu_names_the_papers_components_without_loading_them(cache_env, monkeypatch):
    monkeypatch.delenv("LAZYMEM_QWEN3_EMBEDDING_8B", raising=False)
    monkeypatch.setenv("LAZYMEM_BGE_RERANKER_V2_M3", "/models/bge-reranker-v2-m3")
    cfg = compose_preset("paper_gpu")
    assert cfg.n == 50
    assert cfg._target_ == "lazymem.retrieval.hybrid.HybridRetriever"
    assert cfg.retrievers.bm25._target_ == "lazymem.retrieval.bm25.BM25Retriever"
    assert cfg.retrievers.bm25.backend == "rank_bm25"
    assert cfg.retrievers.dense.encoder.model == "Qwen/Qwen3-Embedding-8B"
    assert cfg.retrievers.dense.query_template.startswith("Instruct: ")
    assert cfg.retrievers.dense.query_template.endswith("\nQuery:{query}")
    assert cfg.retrievers.dense.template == "{text}"  # documents get no instruction
    assert cfg.reranker._target_ == "lazymem.retrieval.rerank.FlagReranker"
    assert cfg.reranker.model == "/models/bge-reranker-v2-m3"
    assert cfg.fusion.k == 60

    # Instantiating is cheap: weights load on first use only.
    retriever = instantiate(cfg)
    encoder = retriever.retrievers["dense"].encoder
    assert isinstance(encoder, SentenceEncoder) and encoder._model is None
    assert isinstance(retriever.reranker, FlagReranker) and retriever.reranker._model is None
    # a device list from the config reaches FlagEmbedding as a plain list (it refuses OmegaConf's ListConfig)
    placed = instantiate(compose_preset("paper_gpu", "placement.reranker_devices=[cuda:1]")).reranker
    assert type(placed.devices) is list and placed.devices == ["cuda:1"]
    assert isinstance(retriever.retrievers["bm25"], BM25Retriever)
    assert isinstance(retriever.retrievers["dense"].cache, EmbeddingCache)


@pytest.mark.parametrize("name", PRESETS)
def test_token_pattern_survives_yaml(name):
    cfg = compose_preset(name)
    bm25 = cfg.retrievers.get("bm25")
    if bm25 is not None:
        assert bm25.token_pattern == r"(?u)\b\w+\b"


_KEY = re.compile(r"^(\s*)([A-Za-z_][\w]*):(.*)$")
_DOCUMENTED_BY_PARENT = {"depth", "weights", "model_kwargs"}


@pytest.mark.parametrize("name", RETRIEVAL_FILES)
def test_every_knob_has_a_comment(name):
    lines = (CONF / "retrieval" / name).read_text().splitlines()
    parents: list[tuple[int, str]] = []
    missing = []
    for i, line in enumerate(lines):
        m = _KEY.match(line)
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2), m.group(3).strip()
        while parents and parents[-1][0] >= indent:
            parents.pop()
        parent = parents[-1][1] if parents else None
        if not value:  # a mapping: its children are the knobs
            parents.append((indent, key))
            continue
        if key == "_target_" or parent in _DOCUMENTED_BY_PARENT:
            continue
        previous = next((p for p in reversed(lines[:i]) if p.strip()), "")
        if not previous.strip().startswith("#"):
            missing.append(key)
    assert not missing, f"{name}: knobs without a comment above: {missing}"
    assert OmegaConf.load(CONF / "retrieval" / name)  # plain YAML too
