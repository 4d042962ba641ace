"""LazyMem as an agent's memory: the Python API (memory.py) over a store (store.py), served over HTTP
(service.py, `lazymem serve`) and as MCP tools (mcp_server.py, `lazymem mcp`)."""
