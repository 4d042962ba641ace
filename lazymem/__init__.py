"""lazymem: query-time memory construction for LLM agents."""
