"""`lazymem serve` replicas on PostgreSQL through a restart and an outage of the database (a benchmark; its
short form is the test tests/e2e/test_outage.py): clients that retry with idempotency keys lose nothing and
store nothing twice, and the service answers 503 with Retry-After, never 500, while the database is away.

    .venv/bin/python scripts/bench_outage.py --replicas 2 --clients 8 --seconds 40 --outage-s 8

Starts a throwaway PostgreSQL cluster of its own (tests/postgres_cluster.py) and --replicas services on
it (method=rag). --clients clients add one message at a time, each with a new Idempotency-Key, to the
replicas in turn; a request that fails (503, a transport error, a timeout) is retried with the same key and
body, on the next replica. Meanwhile the database is restarted (a fast shutdown, at a quarter of the run)
and stopped for --outage-s seconds (at half of it). Afterwards every acknowledged add must be stored once,
and no text twice. Prints a table; --out FILE keeps the figures as JSON.
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
KEY = "outage-key-0123456789"


@dataclass
class Tally:
    """What the clients saw, counted across threads."""

    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    transport_errors: int = 0
    acknowledged: dict[str, list[int]] = field(default_factory=dict)  # text -> ids
    slowest_503_s: float = 0.0
    retry_after: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def to_dict(self) -> dict:
        return {
            "requests": self.requests,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "transport_errors": self.transport_errors,
            "acknowledged": len(self.acknowledged),
            "slowest_503_s": round(self.slowest_503_s, 2),
        }


def client_loop(urls: list[str], c: int, stop: threading.Event, tally: Tally, timeout_s: float) -> None:
    """Client `c`: one message per add, each with its own key; a failed add is sent again, same key, same
    body, to the next replica, until it is acknowledged (or the run ends with it unacknowledged)."""
    n, turn = 0, c
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=timeout_s) as http:
        while not stop.is_set():
            text, key = f"client {c} message {n}", f"c{c}-n{n}"
            while not stop.is_set():
                url = urls[turn % len(urls)]
                turn += 1
                t0 = time.monotonic()
                try:
                    r = http.post(
                        f"{url}/v1/users/u{c % 4}/messages",
                        json={"messages": [{"role": "user", "text": text}]},
                        headers={"Idempotency-Key": key},
                    )
                except httpx.TransportError:
                    with tally.lock:
                        tally.requests += 1
                        tally.transport_errors += 1
                    time.sleep(0.2)
                    continue
                took = time.monotonic() - t0
                with tally.lock:
                    tally.requests += 1
                    tally.statuses[r.status_code] += 1
                    if r.status_code == 503:
                        tally.slowest_503_s = max(tally.slowest_503_s, took)
                        tally.retry_after.add(r.headers.get("retry-after", ""))
                    if r.status_code == 201:
                        tally.acknowledged[text] = r.json()["ids"]
                if r.status_code == 201:
                    break
                time.sleep(0.2 if r.status_code != 503 else min(1.0, float(r.headers.get("retry-after", 1))))
            n += 1


def first_success_after(url: str, since: float, limit_s: float) -> float | None:
    """Seconds from `since` until an add through `url` succeeds (None: not within `limit_s`)."""
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=5) as http:
        while time.monotonic() - since < limit_s:
            try:
                r = http.post(
                    f"{url}/v1/users/probe/messages",
                    json={"messages": [{"role": "user", "text": "probe"}]},
                )
                if r.status_code == 201:
                    return time.monotonic() - since
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    return None


def stored_texts(dsn: str) -> Counter:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT text FROM messages WHERE tenant = 'acme' AND user_id <> 'probe'")
        return Counter(text for (text,) in rows)


def probe_outage(urls: list[str]) -> dict:
    """While the database is stopped: /ready's and a query's status and answer time, /health's status."""
    out = {}
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {KEY}"}) as http:
        t0 = time.monotonic()
        ready = http.get(urls[0] + "/ready")
        out["ready_status"], out["ready_s"] = ready.status_code, round(time.monotonic() - t0, 2)
        out["health_status"] = http.get(urls[0] + "/health").status_code
        t0 = time.monotonic()
        query = http.post(urls[0] + "/v1/users/u0/query", json={"question": "message?"})
        out["query_status"], out["query_s"] = query.status_code, round(time.monotonic() - t0, 2)
        out["query_code"] = query.json().get("code") if query.status_code != 200 else None
        out["query_detail"] = query.json().get("detail") if query.status_code != 200 else None
    return out


def run(cluster, dsn: str, urls: list[str], clients: int, seconds: float, outage_s: float) -> dict:
    """The load, the restart and the outage; the figures, with the checks' results."""
    tally, stop = Tally(), threading.Event()
    threads = [
        threading.Thread(target=client_loop, args=(urls, c, stop, tally, 5.0), daemon=True)
        for c in range(clients)
    ]
    for t in threads:
        t.start()
    time.sleep(seconds / 4)
    cluster.restart()
    time.sleep(max(0.0, seconds / 4 - 1))
    cluster.stop()
    stopped = time.monotonic()
    time.sleep(min(2.0, outage_s / 2))
    during = probe_outage(urls)
    time.sleep(max(0.0, outage_s - (time.monotonic() - stopped)))
    cluster.start(init=False)
    back = time.monotonic()
    recovery = [first_success_after(url, back, 30) for url in urls]
    time.sleep(max(0.0, seconds / 2 - outage_s))
    stop.set()
    for t in threads:
        t.join(30)
    stored = stored_texts(dsn)
    acked = set(tally.acknowledged)
    figures = tally.to_dict()
    figures.update(during)
    figures["recovery_s"] = [None if r is None else round(r, 1) for r in recovery]
    figures["acknowledged_kept"] = sum(1 for text in acked if stored[text] >= 1)
    figures["acknowledged_lost"] = len(acked) - figures["acknowledged_kept"]
    figures["duplicates"] = sum(n - 1 for n in stored.values() if n > 1)
    figures["retry_after"] = sorted(tally.retry_after)
    return figures


def table(figures: dict) -> str:
    rows = [
        ("requests", figures["requests"]),
        ("201", figures["statuses"].get("201", 0)),
        ("503", figures["statuses"].get("503", 0)),
        ("500", figures["statuses"].get("500", 0)),
        ("other statuses", {k: v for k, v in figures["statuses"].items() if k not in ("201", "503", "500")}),
        ("transport errors (client gave up or replica unreachable)", figures["transport_errors"]),
        ("slowest 503 (s)", figures["slowest_503_s"]),
        ("Retry-After values", figures["retry_after"]),
        ("/ready while stopped (status, s)", (figures["ready_status"], figures["ready_s"])),
        ("/health while stopped", figures["health_status"]),
        ("a query while stopped (status, s)", (figures["query_status"], figures["query_s"])),
        ("first add after the restart, per replica (s)", figures["recovery_s"]),
        ("acknowledged adds", figures["acknowledged"]),
        ("acknowledged adds kept", figures["acknowledged_kept"]),
        ("duplicates", figures["duplicates"]),
    ]
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--outage-s", type=float, default=8)
    parser.add_argument("--wait-s", type=float, default=3, help="agent.store.wait_s of the replicas")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "tests")]
    from postgres_cluster import new_cluster

    from agent_helpers import Service

    with (
        tempfile.TemporaryDirectory(prefix="lazymem-outage-") as tmp,
        new_cluster() as cluster,
    ):
        dsn = cluster.new_database()
        services = start_replicas(Service, Path(tmp), dsn, args.replicas, args.wait_s)
        try:
            figures = run(cluster, dsn, [s.url for s in services], args.clients, args.seconds, args.outage_s)
        finally:
            for svc in services:
                svc.stop()
    figures["args"] = vars(args) | {"out": str(args.out)}
    print(table(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


def start_replicas(service, tmp: Path, dsn: str, n: int, wait_s: float) -> list:
    keys = tmp / "keys.yaml"
    keys.write_text(f"acme: {{keys: [{KEY}]}}\n")
    common = (
        "method=rag",
        f"serve.keys_file={keys}",
        "agent/store=postgres",
        f"agent.store.dsn={dsn}",
        f"agent.store.wait_s={wait_s}",
    )
    started = []
    for r in range(n):
        (tmp / f"r{r}").mkdir()
        started.append(service(tmp / f"r{r}", *common))
    return started


if __name__ == "__main__":
    main()
