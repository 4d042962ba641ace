"""Prompt and generation speed of the installed llama.cpp build on the bundled Qwen2.5-0.5B (CPU).

Compare two builds by putting the other one first on the path, e.g. an AVX-512 wheel unpacked into DIR:

    LLAMA_CPU=avx512 ... pip wheel --no-deps --no-binary llama-cpp-python -w WH llama-cpp-python==0.3.36
    .venv/bin/python -m pip install --no-deps --target DIR WH/llama_cpp_python-*.whl
    .venv/bin/python scripts/bench_llama_build.py                      # the default (AVX2) build
    PYTHONPATH=DIR .venv/bin/python scripts/bench_llama_build.py       # the other build

It prints the build's own feature line and the median of --repeats runs of prompt tokens/s and generated
tokens/s (greedy, a ~400-token prompt, 64 new tokens).
"""

from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp

from lazymem.llm.models import resolve_model

PROMPT = " ".join(f"Message {i}: I moved my piano to the new apartment on day {i}." for i in range(30))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(llama_cpp.__file__)
    print(llama_cpp.llama_print_system_info().decode().strip())
    llm = llama_cpp.Llama(
        str(resolve_model("bundled:qwen2.5-0.5b")), n_ctx=2048, n_threads=args.threads, verbose=False
    )
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    prompt_rates, gen_rates = [], []
    for i in range(args.repeats):
        llm.reset()  # no prompt cache between runs
        t0 = time.perf_counter()
        llm.create_completion(PROMPT + f" ({i})", max_tokens=1, temperature=0.0)
        llm.reset()  # the same prompt work again, so the difference is the 64 generated tokens
        t1 = time.perf_counter()
        out = llm.create_completion(PROMPT + f" [{i}]", max_tokens=64, temperature=0.0)
        t2 = time.perf_counter()
        generated = out["usage"]["completion_tokens"]
        prompt_rates.append(n_prompt / (t1 - t0))
        gen_rates.append(generated / max(1e-9, (t2 - t1) - (t1 - t0)))
    print(
        f"prompt {n_prompt} tokens: {statistics.median(prompt_rates):.0f} tok/s; "
        f"generation: {statistics.median(gen_rates):.1f} tok/s (median of {args.repeats})"
    )


if __name__ == "__main__":
    main()
