"""LLM configs composed from conf/llm/, and watching the processes of managed model servers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR

from helpers import ROOT


def llm_conf(name: str, *overrides: str) -> dict:
    """The `llm` node of the root config composed with llm=NAME (+llm=NAME if the root has no default)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        try:
            cfg = compose("config", overrides=[f"llm={name}", *overrides])
        except ConfigCompositionException:
            cfg = compose("config", overrides=[f"+llm={name}", *overrides])
    return OmegaConf.to_container(cfg.llm, resolve=True)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def wait_until(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


PARENT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from lazymem.llm.managed_server import ManagedServer
    from lazymem.llm.llamacpp_server import LlamaCppServer
    from lazymem.llm.models import resolve_model
    if sys.argv[1] == "llama":
        s = LlamaCppServer(resolve_model("bundled:smollm2-135m"), "smol", {logs!r}, n_threads=1).start()
    else:
        s = ManagedServer({cmd!r}, "fake", {logs!r}).start()
    print(s.pid, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)  # no stop(): atexit has to do it
    time.sleep(600)
    """
)


def spawn_parent(tmp_path: Path, cmd: list[str], kind: str, how: str) -> tuple[subprocess.Popen, int]:
    code = PARENT.format(root=str(ROOT), cmd=cmd, logs=str(tmp_path / "logs"))
    err = open(tmp_path / "parent.stderr", "w")  # noqa: SIM115  (the child holds it; closed at exit)
    parent = subprocess.Popen(
        [sys.executable, "-c", code, kind, how], stdout=subprocess.PIPE, stderr=err, text=True
    )
    line = parent.stdout.readline()
    err.close()
    assert line.strip().isdigit(), (
        f"parent failed to start a server: {(tmp_path / 'parent.stderr').read_text()}"
    )
    return parent, int(line)


# config.json of the paper's models (real architectures, no weights): what the memory estimates read
QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "head_dim": 128, "num_key_value_heads": 8}


MODEL_CONFIGS = {
    "Qwen3-32B": QWEN3
    | {"hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 25600, "num_attention_heads": 64}
    | {"tie_word_embeddings": False, "max_position_embeddings": 40960},
    "Qwen3-4B": QWEN3
    | {"hidden_size": 2560, "num_hidden_layers": 36, "intermediate_size": 9728, "num_attention_heads": 32}
    | {"tie_word_embeddings": True, "max_position_embeddings": 40960},
    "Qwen3-Embedding-8B": QWEN3
    | {"hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288, "num_attention_heads": 32}
    | {"vocab_size": 151665},
    "bge-reranker-v2-m3": {"model_type": "xlm-roberta", "hidden_size": 1024, "num_hidden_layers": 24}
    | {"intermediate_size": 4096, "num_attention_heads": 16, "vocab_size": 250002}
    | {"max_position_embeddings": 8194, "type_vocab_size": 1, "torch_dtype": "float32"},
}


def write_model_dirs(root: Path) -> dict[str, Path]:
    """A model directory under `root` per MODEL_CONFIGS entry, holding only its config.json."""
    dirs = {}
    for name, config in MODEL_CONFIGS.items():
        dirs[name] = root / name
        dirs[name].mkdir()
        (dirs[name] / "config.json").write_text(json.dumps(config))
    return dirs


# each model directory variable of the paper experiments -> the architecture it holds
PAPER_MODEL_ENV = {
    "LAZYMEM_QWEN3_32B": "Qwen3-32B",
    "LAZYMEM_4B_DIR": "Qwen3-4B",
    "LAZYMEM_QWEN3_4B": "Qwen3-4B",
    "LAZYMEM_SFT_MODEL": "Qwen3-4B",
    "LAZYMEM_RL_MODEL": "Qwen3-4B",
    "LAZYMEM_QWEN3_EMBEDDING_8B": "Qwen3-Embedding-8B",
    "LAZYMEM_BGE_RERANKER_V2_M3": "bge-reranker-v2-m3",
}


def paper_model_dirs(root: Path, monkeypatch) -> dict[str, Path]:
    """write_model_dirs under `root`, each paper experiment's model variable pointed at its directory."""
    dirs = write_model_dirs(root)
    for var, name in PAPER_MODEL_ENV.items():
        monkeypatch.setenv(var, str(dirs[name]))
    return dirs


def gpus(n: int, gib: float = 80.0, free: float | None = None) -> list:
    """A fake inventory of `n` GPUs of `gib` GiB each, `free` GiB free (default: all)."""
    from lazymem.gpu.inventory import Gpu

    return [Gpu(i, gib, gib if free is None else free) for i in range(n)]
