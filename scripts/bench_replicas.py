"""Replicas of `lazymem serve` on one PostgreSQL under load (a benchmark, not a test): many users with a
history each, at several numbers of concurrent clients.

    .venv/bin/python scripts/bench_replicas.py --dsn postgresql://USER@HOST:PORT/DB --replicas 2 -- method=rag

Starts --replicas services on the database at --dsn (its tables are dropped first), each in its own folder;
client c talks to replica c % R, as a round-robin load balancer would.
1. Seeding: --users users of --history messages each, one add per user (split into adds of at most 100),
   sent by --seed-clients concurrent clients: messages stored per second.
2. Indexing: from the last add until no user is pending in the database (the replicas' background indexers
   share the work): seconds, and messages embedded per second.
3. Per level of --clients: --requests adds (one message to a random user) per client, then --requests
   queries (a random user) per client: p50 / p95 and throughput. Queries are split into a user's first on
   its replica (which builds the user's indexes from the stored vectors) and the later ones.
4. Resident memory of each replica after the warm-up and at the end, and per open user (the growth over
   the users each replica holds open, at most agent.max_open_users).

--reuse keeps the database of an earlier run (same --users and --history) and skips steps 1 and 2: the
same indexed users under another method or replica count. Prints a markdown table; --out FILE keeps JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from bench_agent_scale import empty_database
from bench_service import KEY, TOPICS, failures, message, phase, start


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pending_users(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT COUNT(*) FROM pending").fetchone()[0]


def stats(latencies: list[float]) -> dict:
    if not latencies:
        return {"n": 0}
    return {
        "n": len(latencies),
        "p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "p95_ms": 1000 * float(np.percentile(latencies, 95)),
    }


async def seed(urls: list[str], users: int, history: int, clients: int) -> dict:
    """Every user's history, one user per request (adds of at most 100 messages)."""
    rng = random.Random(0)
    queue = list(range(users))
    headers = {"Authorization": f"Bearer {KEY}"}

    async def client(c: int, http: httpx.AsyncClient) -> None:
        while queue:
            u = queue.pop()
            for start_ in range(0, history, 100):
                batch = [message(rng, i) for i in range(start_, min(history, start_ + 100))]
                r = await http.post(f"{urls[c % len(urls)]}/v1/users/u{u}/messages", json={"messages": batch})
                r.raise_for_status()

    async with httpx.AsyncClient(headers=headers, timeout=600) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c, http) for c in range(clients)))
        wall = time.perf_counter() - t0
    return {"seed_s": wall, "seed_msgs_per_s": users * history / wall}


async def level(urls: list[str], clients: int, requests: int, users: int, history: int, seen: set) -> dict:
    """One level: the adds, then the queries, `requests` per client each."""
    rng = random.Random(clients)
    headers = {"Authorization": f"Bearer {KEY}"}
    first, later = [], []
    async with httpx.AsyncClient(headers=headers, timeout=900) as http:

        def add(c, r):
            url = urls[c % len(urls)]
            return http.post(
                f"{url}/v1/users/u{rng.randrange(users)}/messages",
                json={"messages": [message(rng, history + r)]},
            )

        async def query(c, r):
            replica, user = c % len(urls), rng.randrange(users)
            t0 = time.perf_counter()
            resp = await http.post(
                f"{urls[replica]}/v1/users/u{user}/query",
                json={"question": f"What did I do about {TOPICS[r % 8]}?"},
            )
            if resp.is_success:
                (later if (replica, user) in seen else first).append(time.perf_counter() - t0)
                seen.add((replica, user))
            return resp

        out = {"clients": clients}
        for name, call in (("add", add), ("query", query)):
            latencies, failed, wall = await phase(http, clients, requests, call)
            out[name] = stats(latencies) | {"per_s": len(latencies) / wall, "failed": failures(failed)}
        out["query_first"], out["query_later"] = stats(first), stats(later)
        return out


async def warm_up(urls: list[str]) -> None:
    """Every replica loads its models (the encoder, the reranker) before anything is timed."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=900) as http:
        for url in urls:
            body = {"messages": [{"role": "user", "text": "warming up"}]}
            (await http.post(f"{url}/v1/users/warm-up/messages", json=body)).raise_for_status()
            (await http.post(f"{url}/v1/users/warm-up/query", json={"question": "what?"})).raise_for_status()


async def wait_indexed(dsn: str, timeout_s: float) -> float:
    t0 = time.perf_counter()
    while pending_users(dsn):
        if time.perf_counter() - t0 > timeout_s:
            raise SystemExit(f"still {pending_users(dsn)} users pending after {timeout_s:.0f} s")
        await asyncio.sleep(0.5)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dsn", required=True, help="the PostgreSQL database the replicas share (emptied first)"
    )
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--history", type=int, default=100, help="messages each user starts with")
    parser.add_argument("--seed-clients", type=int, default=32)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=10, help="adds and queries per client and level")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database of an earlier run; no seeding"
    )
    parser.add_argument("--index-timeout", type=float, default=7200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*", help="service config overrides (after --)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed benchmark still stops its services
    if not args.reuse:
        empty_database(args.dsn)
    store = ["agent/store=postgres", f"agent.store.dsn={args.dsn}"]
    figures: dict = {"replicas": args.replicas, "users": args.users, "history": args.history}
    figures["overrides"] = args.overrides
    with tempfile.TemporaryDirectory() as tmp:
        procs, urls = [], []
        try:
            for k in range(args.replicas):
                (Path(tmp) / f"r{k}").mkdir()
                proc, url = start(Path(tmp) / f"r{k}", [*store, *args.overrides])
                procs.append(proc)
                urls.append(url)
            asyncio.run(warm_up(urls))
            figures["rss_after_warm_up_mb"] = [rss_mb(p.pid) for p in procs]
            if not args.reuse:
                figures |= asyncio.run(seed(urls, args.users, args.history, args.seed_clients))
                index_s = asyncio.run(wait_indexed(args.dsn, args.index_timeout))
                figures |= {"index_s": index_s, "embedded_per_s": args.users * args.history / index_s}
                print(json.dumps(figures), flush=True)
            seen: set = set()
            figures["levels"] = []
            for clients in args.clients:
                figures["levels"].append(
                    asyncio.run(level(urls, clients, args.requests, args.users, args.history, seen))
                )
                print(json.dumps(figures["levels"][-1]), flush=True)
            figures["rss_end_mb"] = [rss_mb(p.pid) for p in procs]
            open_users = [min(64, sum(1 for r, _ in seen if r == k)) for k in range(len(procs))]
            figures["rss_per_open_user_mb"] = [
                (end - warm) / max(1, n)
                for end, warm, n in zip(
                    figures["rss_end_mb"], figures["rss_after_warm_up_mb"], open_users, strict=True
                )
            ]
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                proc.wait(60)
    print(table(figures))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1))


def table(f: dict) -> str:
    rows = [
        f"replicas {f['replicas']}, {f['users']} users x {f['history']} messages, {' '.join(f['overrides'])}",
    ]
    if "seed_s" in f:
        rows.append(
            f"seeding {f['seed_msgs_per_s']:.0f} msgs/s; last add to fully indexed {f['index_s']:.0f} s "
            f"({f['embedded_per_s']:.0f} embedded/s)"
        )
    rows += [
        "| clients | add p50 / p95 (ms) | adds/s | query p50 / p95 (ms) | queries/s "
        "| first query p50 / p95 (ms) | later query p50 / p95 (ms) | failed (add / query) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pair(s: dict) -> str:
        return f"{s['p50_ms']:.0f} / {s['p95_ms']:.0f}" if s.get("n") else "-"

    for lv in f["levels"]:
        a, q = lv["add"], lv["query"]
        rows.append(
            f"| {lv['clients']} | {pair(a)} | {a['per_s']:.1f} | {pair(q)} | {q['per_s']:.2f} "
            f"| {pair(lv['query_first'])} | {pair(lv['query_later'])} | {a['failed']} / {q['failed']} |"
        )
    per_user = ", ".join(f"{x:.2f}" for x in f["rss_per_open_user_mb"])
    rows.append(f"resident memory per replica at the end (MB): {f['rss_end_mb']}; per open user: {per_user}")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
