"""lazymem: query-time memory construction for LLM agents."""


def __getattr__(name: str):
    # `from lazymem import Memory` without making `import lazymem` pay for torch, Hydra and the rest.
    if name == "Memory":
        from lazymem.agent.memory import Memory

        return Memory
    raise AttributeError(f"module 'lazymem' has no attribute {name!r}")
