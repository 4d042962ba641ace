"""Load test of `lazymem serve` (a benchmark, not a test): add and query latency p50/p95 and throughput at
several numbers of concurrent clients, each client its own user.

    .venv/bin/python scripts/bench_service.py --clients 1 8 32 -- method=rag          # retrieval only
    .venv/bin/python scripts/bench_service.py --clients 1 8 --requests 2 -- llm=cpu \
        llm.common.model=bundled:smollm2-135m llm.common.served_name=smollm2-135m     # with the LLM gate

Starts the service on a free port in a temporary folder (overrides after `--`), seeds every user with
`--history` messages, then per level runs the adds (one message each) and the queries as two phases. A
warm-up level loads the models first; each level's first query per user still indexes its history. A
request that waits longer than `--timeout` seconds is counted as timed out, one answered with an error
status as failed (per status code); neither is timed. `--keep DIR` keeps the service's folder (its log,
the model servers' logs, the store) for a look at what failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
KEY = "bench-key"
TOPICS = ["my dog", "the garden", "my trip to Rome", "work", "a concert", "my sister", "running", "cooking"]


def start(tmp: Path, overrides: list[str]) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        f"serve.port={port}",
        f"agent.dir={tmp}/data",
        f"paths.cache={tmp}/cache",
        "serve.log_level=warning",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lazymem.run", "serve", *args, *overrides],
        cwd=ROOT,
        env={**os.environ, "LAZYMEM_API_KEYS": f"{KEY}=bench"},
        stdout=open(tmp / "service.log", "wb"),  # noqa: SIM115 - lives as long as the process
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health").status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit(f"service did not start; see {tmp / 'service.log'}")


def message(rng: random.Random, i: int) -> dict:
    return {
        "role": "user",
        "text": f"Note {i}: today I spent {rng.randint(1, 9)} hours on {rng.choice(TOPICS)}.",
    }


async def phase(
    http: httpx.AsyncClient, clients: int, requests: int, call
) -> tuple[list[float], dict, float]:
    """Latencies of the requests that succeeded, the others counted by outcome ("timeout" or the HTTP
    status), and the wall time."""
    latencies: list[float] = []
    failed: dict[str, int] = {}

    async def client(c: int) -> None:
        for r in range(requests):
            t0 = time.perf_counter()
            try:
                resp = await call(c, r)
            except httpx.TimeoutException:  # the service may still work on it: later levels see that
                failed["timeout"] = failed.get("timeout", 0) + 1
                continue
            if resp.is_success:
                latencies.append(time.perf_counter() - t0)
            else:
                failed[str(resp.status_code)] = failed.get(str(resp.status_code), 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies, failed, time.perf_counter() - t0


async def level(url: str, clients: int, requests: int, history: int, timeout_s: float = 900) -> dict:
    rng = random.Random(clients)
    prefix = f"c{clients}-u"
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s) as http:
        for c in range(clients):  # seed each user's history (not timed)
            seed = {"messages": [message(rng, i) for i in range(history)]}
            (await http.post(f"/v1/users/{prefix}{c}/messages", json=seed)).raise_for_status()

        def add(c, r):
            return http.post(
                f"/v1/users/{prefix}{c}/messages", json={"messages": [message(rng, history + r)]}
            )

        def query(c, r):
            return http.post(
                f"/v1/users/{prefix}{c}/query", json={"question": f"What did I do about {TOPICS[r % 8]}?"}
            )

        out = {}
        for name, call in (("add", add), ("query", query)):
            lat, failed, wall = await phase(http, clients, requests, call)
            p50, p95 = (np.percentile(lat, 50), np.percentile(lat, 95)) if lat else (np.nan, np.nan)
            out[name] = (p50, p95, len(lat) / wall, failed)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=20, help="adds and queries per client and level")
    parser.add_argument("--history", type=int, default=50, help="messages each user starts with")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a client waits for one reply")
    parser.add_argument("--keep", type=Path, default=None, help="copy the service's folder here at the end")
    parser.add_argument("overrides", nargs="*", help="service config overrides (after --)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed benchmark still stops its service
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(Path(tmp), args.overrides)
        try:
            asyncio.run(level(url, 1, 1, 2))  # warm-up: the encoder (and any model server) loads here
            setup = f"{args.requests} requests per client, history {args.history}"
            print(f"overrides: {' '.join(args.overrides)}; {setup}")
            print(
                "| clients | add p50 (s) | add p95 (s) | adds/s | query p50 (s) | query p95 (s) | queries/s "
                "| failed (add / query) |"
            )
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for clients in args.clients:
                r = asyncio.run(level(url, clients, args.requests, args.history, args.timeout))
                (a50, a95, athr, aout), (q50, q95, qthr, qout) = r["add"], r["query"]
                print(
                    f"| {clients} | {a50:.3f} | {a95:.3f} | {athr:.1f} | {q50:.3f} | {q95:.3f} | {qthr:.2f} "
                    f"| {failures(aout)} / {failures(qout)} |",
                    flush=True,
                )
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
            if args.keep:
                shutil.copytree(tmp, args.keep, dirs_exist_ok=True)


def failures(counts: dict) -> str:
    """'0', or the count with its outcomes, e.g. '3 (502: 2, timeout: 1)'."""
    if not counts:
        return "0"
    return f"{sum(counts.values())} (" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + ")"


if __name__ == "__main__":
    main()
