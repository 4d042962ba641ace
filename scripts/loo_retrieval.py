"""Leave-one-conversation-out choice of the CPU retrieval default (not a test).

    python scripts/loo_retrieval.py [--locomo FILE] [--longmemeval FILE] [--out loo.json]
    python scripts/loo_retrieval.py --summary loo.json      # docs/measurements.md's table, from a run

Units: every conversation of the LoCoMo file and the LongMemEval-S sample as one more unit. Each
retriever variant (BM25 text template, stopwords, stemmer; dense text template) ranks every question's
whole history once; every fusion setting (RRF k, list depth) is then applied to those rankings, exactly
as `HybridRetriever` fuses them (the chosen setting is re-run through the real preset as a check). A
setting's score on a unit is its All@50 averaged over w = 0..3. The default is the setting of smallest
worst-case regret over the units (scripts/loo_select.py), and leave-one-out estimates how that
rule does on a unit it was not chosen on. Embeddings come from .cache/embeddings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from loo_select import choose, leave_one_out, regrets, spread  # beside this script
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.windows import expanded_indices
from lazymem.data import locomo, longmemeval
from lazymem.data.io import read_json
from lazymem.retrieval.base import Ranking, top_k
from lazymem.retrieval.fusion import RRF

N, RADII = 50, (0, 1, 2, 3)
BM25 = {
    "template": ["{text}", "{role}: {text}", "{time} {role}: {text}"],
    "stopwords": ["en", "en_plus"],
    "stemmer": [None, "snowball"],
}
DENSE = {"template": ["{text}", "{role}: {text}"]}
FUSION = {"k": [10, 30, 60], "depth": [50, 100, None]}
_DEFAULT_BM25 = json.dumps({"template": "{text}", "stopwords": "en", "stemmer": None})
_TEXT = json.dumps({"template": "{text}"})
# the presets before this protocol, for comparison
FORMER = {
    "former hybrid": f"bm25 {_DEFAULT_BM25} + dense {_TEXT} rrf " + json.dumps({"k": 60, "depth": 100}),
    "former hybrid_tuned": "bm25 "
    + json.dumps({"template": "{time} {role}: {text}", "stopwords": "en", "stemmer": None})
    + f" + dense {_TEXT} rrf "
    + json.dumps({"k": 60, "depth": 100}),
    "bm25 alone": f"bm25 {_DEFAULT_BM25}",
    "dense alone": f"dense {_TEXT}",
}


def variants(axes: dict) -> list[dict]:
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def load_units(locomo_path: str, lme_path: str | None) -> dict:
    names = OmegaConf.load(CONF_DIR / "data" / "locomo.yaml").loader.category_names
    conversations = list(range(len(read_json(locomo_path))))
    ds = locomo.load(locomo_path, conversations=conversations, category_names=names)
    units = {
        hid: (ds, [q for q in ds.questions if q.history_id == hid and q.gold_idx]) for hid in ds.histories
    }
    if lme_path:
        lme = longmemeval.load(lme_path)
        units["longmemeval_s"] = (lme, [q for q in lme.questions if q.gold_idx])
    return units


def rank_all(units: dict, base) -> dict:
    """{(kind, variant key): {question id: Ranking over history positions}} for every retriever variant."""
    rankings = {}
    for v in variants(BM25):
        retriever = instantiate(OmegaConf.merge(base.retrievers.bm25, v))
        rankings[("bm25", json.dumps(v))] = _rank(units, retriever.build, lambda ix, q: ix.search(q.text))
    questions = [q for _, qs in units.values() for q in qs]
    dense = instantiate(base.retrievers.dense)
    queries = [dense.query_template.format(query=q.text) for q in questions]
    query_vecs = dict(zip([q.id for q in questions], dense.encoder.encode(queries), strict=True))  # one batch

    def search(index, q):
        return top_k(index.matrix @ query_vecs[q.id], None)

    for v in variants(DENSE):
        retriever = instantiate(OmegaConf.merge(base.retrievers.dense, v))
        rankings[("dense", json.dumps(v))] = _rank(units, retriever.build, search)
    return rankings


def _rank(units: dict, build, search) -> dict:
    out, t0 = {}, time.perf_counter()
    for ds, questions in units.values():
        for hid in dict.fromkeys(q.history_id for q in questions):
            index = build(ds.histories[hid].messages)
            for q in questions:
                if q.history_id == hid:
                    out[q.id] = search(index, q)
    print(f"  ranked {len(out)} questions in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def settings(rankings: dict) -> dict[str, dict]:
    """Every setting: one retriever alone (full list) or a bm25 x dense pair with an RRF k and depth."""
    bm25 = [key for key in rankings if key[0] == "bm25"]
    dense = [key for key in rankings if key[0] == "dense"]
    out = {f"{kind} {v}": {"lists": {kind: (kind, v)}, "fusion": None} for kind, v in bm25 + dense}
    for b, d, f in itertools.product(bm25, dense, variants(FUSION)):
        out[f"bm25 {b[1]} + dense {d[1]} rrf {json.dumps(f)}"] = {
            "lists": {"bm25": b, "dense": d},
            "fusion": f,
        }
    return out


def fused(setting: dict, rankings: dict, qid: str) -> Ranking:
    lists = {name: rankings[key][qid] for name, key in setting["lists"].items()}
    if setting["fusion"] is None:
        return next(iter(lists.values())).head(N)
    f = setting["fusion"]
    rrf = RRF(k=f["k"], depth=dict.fromkeys(lists, f["depth"]))
    return rrf.fuse(lists).head(N)


def covered(positions, history, gold) -> list[bool]:
    idx = [history.messages[i].idx for i in positions]
    return [set(gold) <= expanded_indices(idx, len(history.messages), w) for w in RADII]


def evaluate(units: dict, rankings: dict, grid: dict) -> dict:
    """{setting: {unit: [All@50 at each w]}}."""
    table = {}
    for name, setting in grid.items():
        table[name] = {}
        for unit, (ds, questions) in units.items():
            hits = [
                covered(fused(setting, rankings, q.id).indices, ds.history(q), q.gold_idx) for q in questions
            ]
            table[name][unit] = [sum(h[w] for h in hits) / len(hits) for w in range(len(RADII))]
    return table


def preset_overrides(setting: dict) -> dict:
    """The chosen setting as overrides of the hybrid preset."""
    retrievers = {name: json.loads(key[1]) for name, key in setting["lists"].items()}
    for name in ("bm25", "dense"):
        retrievers.setdefault(name, None)
    over: dict = {"retrievers": retrievers}
    if setting["fusion"] is not None:
        f = setting["fusion"]
        over["fusion"] = {"k": f["k"], "depth": {name: f["depth"] for name in setting["lists"]}}
    return over


def check_with_preset(units: dict, base, over: dict, expected: dict) -> None:
    """The fast path must agree with the real HybridRetriever on the first unit (up to the rare rank flip
    that batch-encoded query vectors can cause)."""
    retriever = instantiate(OmegaConf.merge(base, over))
    unit, (ds, questions) = next(iter(units.items()))
    hits = [covered(_positions(retriever, ds, q), ds.history(q), q.gold_idx) for q in questions]
    real = [sum(h[w] for h in hits) / len(hits) for w in range(len(RADII))]
    if max(abs(a - b) for a, b in zip(real, expected[unit], strict=True)) > 0.01:  # batched query vectors
        raise AssertionError(f"fast path {expected[unit]} != HybridRetriever {real} on {unit}")


def _positions(retriever, ds, q) -> list[int]:
    history = ds.history(q)
    pos = {m.idx: i for i, m in enumerate(history.messages)}
    return [pos[i] for i in retriever.search(history, q.text).indices]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", default="../shared/data/locomo_dev8.json")
    ap.add_argument("--longmemeval", default="../shared/data/longmemeval_s_sample8.json")
    ap.add_argument("--out", default="loo_retrieval.json")
    ap.add_argument("--summary", help="print the table of a finished run's JSON and exit")
    args = ap.parse_args()
    if args.summary:
        print(summary(json.loads(Path(args.summary).read_text())))
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(overrides=["+retrieval=hybrid", "+paths=default", "paths.cache=.cache"])
    base = OmegaConf.create(OmegaConf.to_container(cfg.retrieval, resolve=True))
    units = load_units(args.locomo, args.longmemeval or None)
    print({u: len(qs) for u, (_, qs) in units.items()}, flush=True)
    rankings = rank_all(units, base)
    grid = settings(rankings)
    table = evaluate(units, rankings, grid)
    scores = {name: {u: sum(ws) / len(ws) for u, ws in per.items()} for name, per in table.items()}
    pick = choose(scores)
    report = {
        "units": {u: len(qs) for u, (_, qs) in units.items()},
        "radii": list(RADII),
        "n": N,
        "chosen": {"setting": pick, "overrides": preset_overrides(grid[pick])},
        "best_mean": choose(scores, rule="best_mean"),
        "leave_one_out": {rule: leave_one_out(scores, rule) for rule in ("minimax_regret", "best_mean")},
        "worst_regret": {name: max(r) for name, r in regrets(scores, list(units)).items()},
        "spread": {name: spread(list(per.values())) for name, per in scores.items()},
        "table": table,
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(summary(report))
    check_with_preset(units, base, preset_overrides(grid[pick]), table[pick])


def summary(report: dict) -> str:
    """Leave-one-out picks per held-out unit, then the chosen, best-mean and former default settings."""
    lines = []
    for rule, loo in report["leave_one_out"].items():
        held = spread([x["score"] for x in loo.values()])
        lines.append(f"LOO {rule}: held-out score mean {held['mean']:.3f}, min {held['min']:.3f}")
        lines += [
            f"  {u:14s} {x['score']:.3f} (regret {x['regret']:.3f}) {x['setting']}" for u, x in loo.items()
        ]
    units = list(report["units"])
    lines += ["", "| setting | " + " | ".join(units) + " | mean | std | min | worst regret | All@50 w=0..3 |"]
    lines.append("|---|" + "---:|" * (len(units) + 5))
    rows = {"chosen": report["chosen"]["setting"], "best mean": report["best_mean"], **FORMER}
    for label, name in rows.items():
        per, sp = report["table"][name], report["spread"][name]
        cells = [f"{sum(per[u]) / len(per[u]):.3f}" for u in units]
        by_w = [sum(per[u][w] for u in units) / len(units) for w in range(len(report["radii"]))]
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {sp['mean']:.3f} | {sp['std']:.3f} | {sp['min']:.3f} | "
            f"{report['worst_regret'][name]:.3f} | " + "/".join(f"{x:.3f}" for x in by_w) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
