"""summary.json: accuracy, tokens, latency, gate and construction quality per method, from the records."""

from __future__ import annotations

from collections import Counter, defaultdict

from lazymem.eval.records import Record
from lazymem.eval.summary import Construction, MethodSummary
from lazymem.numeric import describe, mean

STAGES = ("retrieval", "processing", "answer", "judge", "total")


def summarize(records: list[Record]) -> MethodSummary:
    """One method's summary, from the typed fields of its records (eval/records.Record) only.

    LJ (`accuracy`, per type, task-averaged, abstention) counts every applicable question, as the paper
    reports it: a failed question or a judge reply without a label is wrong. `accuracy_judged` is over
    the judged questions only; errors and judge errors are counted beside them.
    """
    not_applicable = sum(r["status"] == "not_applicable" for r in records)
    records = [r for r in records if r["status"] != "not_applicable"]
    ok = [r for r in records if r["status"] == "ok"]
    judged = [r for r in ok if r["correct"] is not None]
    by_type: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        by_type[r["type"]].append(_right(r))
    per_type = {t: sum(v) / len(v) for t, v in sorted(by_type.items())}
    abstain = [_right(r) for r in records if r["abstention"]]
    windows = [w for r in ok for w in r["windows"]]
    runs = [run for r in ok for run in r.get("latency_runs") or [r["latency_s"]]]  # every timed repetition
    outcomes = Counter(w["outcome"] for w in windows)
    gold = [r for r in ok if r["gold_idx"]]
    return {
        "questions": len(records),
        "not_applicable": not_applicable,
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "error_messages": dict(Counter(r["error"] for r in records if r["status"] != "ok").most_common(5)),
        "judged": len(judged),
        "judge_errors": len(ok) - len(judged),
        "accuracy": mean([_right(r) for r in records]),
        "accuracy_by_type": per_type,
        "accuracy_task_averaged": mean(list(per_type.values())),
        "abstention_accuracy": mean(abstain),
        "accuracy_judged": mean([r["correct"] for r in judged]),
        **_scores(records),
        "contains_reference": mean(
            [r["contains_reference"] for r in ok if r.get("contains_reference") is not None]
        ),
        "memory_tokens": describe([r["memory_tokens"] for r in ok]),
        "latency_s": {s: describe([run[s] for run in runs if s in run]) for s in STAGES},
        "windows": len(windows),
        # strict training gate (first reply passes check_decisions) and Table 3's looser "Gate Fmt."
        "gate_format_rate": outcomes["gate_ok"] / len(windows) if windows else None,
        "format_rate_table3": mean([w["format_ok"] for w in windows if "format_ok" in w]),
        "window_outcomes": dict(outcomes),
        "gold_recall_in_memory": mean(
            [len(set(r["gold_idx"]) & set(r["shown"])) / len(r["gold_idx"]) for r in gold]
        ),
        "all_gold_in_memory": mean([set(r["gold_idx"]) <= set(r["shown"]) for r in gold]),
        "construction": _construction(ok),
    }


def _right(record: Record) -> bool:
    return record["status"] == "ok" and record.get("correct") is True


def _scores(records: list[Record]) -> dict:
    """Each model-free metric of the records (e.g. f1): overall and `<name>_by_type`, every question."""
    out: dict = {}
    for name in sorted({k for r in records for k in r["scores"]}):
        by_type: dict[str, list[float]] = defaultdict(list)
        for r in records:
            value = r["scores"].get(name)
            if value is not None:
                by_type[r["type"]].append(value)
        out[name] = mean([v for values in by_type.values() for v in values])
        out[f"{name}_by_type"] = {t: mean(v) for t, v in sorted(by_type.items())}
    return out


def _construction(records: list[Record]) -> Construction:
    """Keep/drop quality against gold over the messages the memory model decided on."""
    gold_kept = gold_total = other_dropped = other_total = found = words = 0
    for r in records:
        for w in r.get("windows") or []:
            f, n = w.get("source_words") or (0, 0)  # records written before the field have none
            found, words = found + f, words + n
        gold, shown = set(r["gold_idx"]), set(r["shown"])
        for i in r["decided"]:
            if i in gold:
                gold_total += 1
                gold_kept += i in shown
            else:
                other_total += 1
                other_dropped += i not in shown
    return {
        "gold_decided": gold_total,
        "gold_kept": gold_kept / gold_total if gold_total else None,
        "nongold_decided": other_total,
        "nongold_dropped": other_dropped / other_total if other_total else None,
        "kept_words_in_source": found / words if words else None,
    }
