"""LLM serving and calls: one async OpenAI-compatible client, an on-disk cache, managed servers."""
