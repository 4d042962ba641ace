"""`lazymem serve` replicas on PostgreSQL while the database hangs (a benchmark; its short form is the test
tests/e2e/test_freeze.py): the postmaster and all its backends are stopped with SIGSTOP for --freeze-s
seconds, so no server-side timeout fires and the kernel still acknowledges every packet.

    .venv/bin/python scripts/bench_freeze.py --replicas 2 --clients 8 --seconds 40 --freeze-s 20

Starts a throwaway PostgreSQL cluster of its own (tests/postgres_cluster.py) and --replicas services on it
(method=rag). Each client, on the replicas in turn: adds one message at a time, each with a new
Idempotency-Key (a failed add is sent again with the same key and body, to the next replica, until it is
acknowledged); forgets every fourth message it got acknowledged (again until the forget is acknowledged,
or the id is found gone); and queries its user every third round, checking that no message whose forget was
acknowledged before the query started comes back. A quarter into the run the database freezes for
--freeze-s seconds. Afterwards: the slowest answer of any request (the contract: agent.store.wait_s plus
about a second), 500s, acknowledged adds kept, duplicates, and forgotten messages returned by a query, an
export or the table itself. --out FILE keeps the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_outage import KEY, start_replicas, stored_texts  # noqa: E402


@dataclass
class Tally:
    """What the clients saw, counted across threads."""

    statuses: Counter = field(default_factory=Counter)  # "add 201", "query 503", ...
    slowest_s: Counter = field(default_factory=Counter)  # per kind of request
    transport_errors: int = 0
    acknowledged: dict[str, int] = field(default_factory=dict)  # text -> id
    forgotten: dict[str, float] = field(default_factory=dict)  # text -> when its forget was acknowledged
    returned: list[str] = field(default_factory=list)  # forgotten texts a later query brought back
    slow: list[tuple] = field(default_factory=list)  # (kind, status, started, seconds) of answers over 4 s
    timings: list[tuple[float, float]] = field(default_factory=list)  # (started, seconds) of every answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, kind: str, status: int, started: float, took: float) -> None:
        with self.lock:
            self.statuses[f"{kind} {status}"] += 1
            self.slowest_s[kind] = max(self.slowest_s[kind], took)
            self.timings.append((started, took))
            if took > 4:
                self.slow.append((kind, status, round(started, 2), round(took, 2)))


def request(
    http: httpx.Client, urls: list[str], turn: int, tally: Tally, kind: str, method: str, path: str, **kw
):
    """One request to the replica of this `turn`; (status, body) or None on a transport error."""
    t0 = time.monotonic()
    try:
        r = http.request(method, urls[turn % len(urls)] + path, **kw)
    except httpx.TransportError:
        with tally.lock:
            tally.transport_errors += 1
        return None
    tally.saw(kind, r.status_code, t0, time.monotonic() - t0)
    return r.status_code, (
        r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    )


def client_loop(urls: list[str], c: int, stop: threading.Event, tally: Tally, timeout_s: float) -> None:
    user, turn, mine = f"u{c % 4}", c, []
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=timeout_s) as http:
        for n in range(1_000_000):
            if stop.is_set():
                return
            text, key = f"client {c} message {n}", f"c{c}-n{n}"
            body = {"messages": [{"role": "user", "text": text}]}
            while not stop.is_set():  # the add, until acknowledged
                turn += 1
                got = request(
                    http,
                    urls,
                    turn,
                    tally,
                    "add",
                    "POST",
                    f"/v1/users/{user}/messages",
                    json=body,
                    headers={"Idempotency-Key": key},
                )
                if got is not None and got[0] == 201:
                    with tally.lock:
                        tally.acknowledged[text] = got[1]["ids"][0]
                    mine.append((text, got[1]["ids"][0]))
                    break
                time.sleep(0.2)
            if n % 4 == 3 and mine:  # forget one of this client's messages, until acknowledged or gone
                text, id = mine.pop(0)
                while not stop.is_set():
                    turn += 1
                    got = request(
                        http,
                        urls,
                        turn,
                        tally,
                        "forget",
                        "POST",
                        f"/v1/users/{user}/forget",
                        json={"message_ids": [id]},
                    )
                    if got is not None and (
                        got[0] == 200 or got[1] and got[1].get("code") == "unknown_messages"
                    ):
                        with tally.lock:
                            tally.forgotten[text] = time.monotonic()
                        break
                    time.sleep(0.2)
            if n % 3 == 0:
                started = time.monotonic()
                turn += 1
                got = request(
                    http,
                    urls,
                    turn,
                    tally,
                    "query",
                    "POST",
                    f"/v1/users/{user}/query",
                    json={"question": f"client {c} message?"},
                )
                if got is not None and got[0] == 200:
                    with tally.lock:
                        gone = [t for t, at in tally.forgotten.items() if at < started]
                    tally.returned += [t for t in gone if any(m["text"] == t for m in got[1]["messages"])]


def run(
    cluster, dsn: str, urls: list[str], clients: int, seconds: float, freeze_s: float, wait_s: float
) -> dict:
    tally, stop = Tally(), threading.Event()
    threads = [
        threading.Thread(target=client_loop, args=(urls, c, stop, tally, wait_s + 30), daemon=True)
        for c in range(clients)
    ]
    for t in threads:
        t.start()
    time.sleep(seconds / 4)
    ready = {}
    frozen_at = time.monotonic()
    with cluster.frozen():
        time.sleep(min(2.0, freeze_s / 2))
        with httpx.Client(timeout=freeze_s) as http:
            t0 = time.monotonic()
            try:
                status = http.get(urls[0] + "/ready").status_code
            except httpx.TransportError:
                status = "no answer"
            ready = {"ready_status": status, "ready_s": round(time.monotonic() - t0, 2)}
        time.sleep(max(0.0, freeze_s - min(2.0, freeze_s / 2) - ready["ready_s"]))
    thawed_at = time.monotonic()
    time.sleep(max(0.0, seconds * 3 / 4 - freeze_s))
    stop.set()
    for t in threads:
        t.join(wait_s + 40)
    stored = stored_texts(dsn)
    acked, forgotten = set(tally.acknowledged), set(tally.forgotten)
    exported = []
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        for u in range(4):
            reply = http.get(f"{urls[-1]}/v1/users/u{u}/export")
            exported += (
                [m["text"] for m in reply.json().get("messages", [])] if reply.status_code == 200 else []
            )
    return {
        "statuses": dict(sorted(tally.statuses.items())),
        "500s": sum(v for k, v in tally.statuses.items() if k.endswith(" 500")),
        "slowest_s": {k: round(v, 2) for k, v in sorted(tally.slowest_s.items())},
        "slowest_answer_s": round(max(tally.slowest_s.values(), default=0.0), 2),
        # the contract's bound is for what waits on the database: requests sent while it was frozen
        "slowest_answer_sent_during_freeze_s": round(
            max((took for t, took in tally.timings if frozen_at <= t <= thawed_at), default=0.0), 2
        ),
        "transport_errors": tally.transport_errors,
        **ready,
        "acknowledged": len(acked),
        "acknowledged_kept": sum(1 for text in acked - forgotten if stored[text] >= 1),
        "acknowledged_lost": sum(1 for text in acked - forgotten if stored[text] == 0),
        "duplicates": sum(n - 1 for n in stored.values() if n > 1),
        "forgotten": len(forgotten),
        "forgotten_returned": len(tally.returned)
        + sum(1 for text in forgotten if stored[text] or text in exported),
        "answers_over_4s": [(k, st, round(t - frozen_at, 2), took) for k, st, t, took in tally.slow],
    }


def table(figures: dict) -> str:
    rows = [(k, v) for k, v in figures.items() if k != "args"]
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--freeze-s", type=float, default=20)
    parser.add_argument("--wait-s", type=float, default=3, help="agent.store.wait_s of the replicas")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "tests")]
    from postgres_cluster import new_cluster

    from agent_helpers import Service

    with tempfile.TemporaryDirectory(prefix="lazymem-freeze-") as tmp, new_cluster() as cluster:
        dsn = cluster.new_database()
        services = start_replicas(Service, Path(tmp), dsn, args.replicas, args.wait_s)
        try:
            figures = run(
                cluster,
                dsn,
                [s.url for s in services],
                args.clients,
                args.seconds,
                args.freeze_s,
                args.wait_s,
            )
        finally:
            for svc in services:
                svc.stop()
    figures["args"] = vars(args) | {"out": str(args.out)}
    print(table(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
