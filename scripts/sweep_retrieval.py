"""All@50 on LoCoMo at w = 0..3 for variations of the hybrid retrieval preset (not a test).

    python scripts/sweep_retrieval.py [LOCOMO_FILE]

Each line prints the coverage at w = 0, 1, 2, 3 for one variation (the composed hybrid preset merged
with the overrides shown). Embeddings are cached in .cache/embeddings, so reruns only encode queries.
"""

import sys

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.data import locomo
from lazymem.eval.coverage import question_coverage

# the category names the project configures (conf/data/locomo.yaml), not a second copy
NAMES = OmegaConf.load(CONF_DIR / "data" / "locomo.yaml").loader.category_names
PATH = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo_dev8.json"
ds = locomo.load(PATH, category_names=NAMES)
with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
    base = compose(overrides=["+retrieval=hybrid", "+paths=default", "paths.cache=.cache"]).retrieval


def run(name, **over):
    r = instantiate(OmegaConf.merge(base, OmegaConf.create(over)))
    res = []
    for q in ds.questions:
        if not q.gold_idx:
            continue
        h = ds.history(q)
        idx = r.search(h, q.text).indices
        res.append([question_coverage(idx, q.gold_idx, len(h.messages), w)["all"] for w in range(4)])
    print(f"{name:32s}", " ".join(f"{sum(x[w] for x in res) / len(res):.3f}" for w in range(4)), flush=True)


run("hybrid (default)")
run("bm25 only", retrievers={"dense": None})
run("dense only", retrievers={"bm25": None})
run("rrf k=10", fusion={"k": 10})
run("fusion depth: all", fusion={"depth": {"bm25": None, "dense": None}})
run("bm25 stopwords en_plus", retrievers={"bm25": {"stopwords": "en_plus"}})
run(
    "speaker in bm25 and dense",
    retrievers={"bm25": {"template": "{role}: {text}"}, "dense": {"template": "{role}: {text}"}},
)
run("speaker in bm25", retrievers={"bm25": {"template": "{role}: {text}"}})
run("time + speaker in bm25 (tuned)", retrievers={"bm25": {"template": "{time} {role}: {text}"}})
