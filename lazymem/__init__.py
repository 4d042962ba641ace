"""lazymem: query-time memory construction for LLM agents."""

# The stages of the package, first to last: a package or top-level module imports only from earlier
# layers, never from its own or a later one, so data flows one way (tests/test_layers.py checks it).
LAYERS = (
    # foundations: configs, the paper's numbers, the data schema, prompts, token counts, storage and process
    # helpers (conf and experiments live at the top of the checkout: pyproject.toml maps them in)
    (
        "conf",
        "experiments",
        "data",
        "prompts",
        "tokens",
        "sqlite",
        "numeric",
        "subproc",
        "interrupt",
        "rundir",
        "cuda_env",
    ),
    # classes a config names by registered name or import path (backends, judge styles)
    ("registry",),
    # serving (LLM backends, servers, clients) and retrieval
    ("llm", "retrieval"),
    # GPUs: model memory estimates (from configs and weights alone), the GPUs a job sees and the plans that
    # place its models there; after llm, whose vLLM server specs the plans read (llm uses no estimate)
    ("gpu",),
    # memory construction: windows, KEEP/DROP decisions, their scoring
    ("construct",),
    # the memory methods compared in the paper
    ("methods",),
    # evaluation, training
    ("eval", "train"),
    # checks before a job starts
    ("preflight", "validate"),
    # the agent memory (API, service, MCP server): a wing above the research core, whose start-up runs the
    # checks above; nothing before it imports it, and only the entry point after it does
    ("agent",),
    # reports, run tracking, sweeps
    ("report", "tracking", "sweep"),
    # the training chain: stages run as lazymem tasks in subprocesses of Ray tasks
    ("chain",),
    # the tasks: each module declares its contract, and the registry maps `task=NAME` to it
    ("tasks",),
    # the run lifecycle, which runs the task the registry names
    ("runner",),
    # the entry point
    ("run",),
)


def __getattr__(name: str):
    # `from lazymem import Memory` without making `import lazymem` pay for torch, Hydra and the rest.
    if name == "Memory":
        from lazymem.agent.memory import Memory

        return Memory
    raise AttributeError(f"module 'lazymem' has no attribute {name!r}")
