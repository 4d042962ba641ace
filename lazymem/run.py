"""The one entry point: `lazymem [task=NAME] [+experiment=NAME] [overrides]`, or `python -m lazymem.run ...`
(see runner.py)."""

import sys

from lazymem.runner import main


def cli() -> None:
    """The `lazymem` console script: Hydra's exit status, 0 after a run that returned.
    `lazymem serve` / `lazymem mcp [overrides]` run the memory service (lazymem/agent) instead of a task;
    `lazymem import` / `lazymem export` move users' histories in and out of its store (agent/transfer.py);
    `lazymem doctor [overrides]` is `task=doctor` without tracking."""
    if sys.argv[1:2] == ["serve"]:
        from lazymem.agent.service import serve

        sys.exit(serve(sys.argv[2:]))
    if sys.argv[1:2] == ["mcp"]:
        from lazymem.agent.mcp_server import main as mcp

        sys.exit(mcp(sys.argv[2:]))
    if sys.argv[1:2] in (["import"], ["export"]):
        from lazymem.agent.transfer import main as transfer

        sys.exit(transfer(sys.argv[1], sys.argv[2:]))
    if sys.argv[1:2] == ["doctor"]:
        sys.argv[1:2] = ["task=doctor", "logger=none"]
    sys.exit(main() and 0)


if __name__ == "__main__":
    cli()
