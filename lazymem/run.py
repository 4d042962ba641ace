"""The one entry point: `lazymem COMMAND [ARGS]`, or `python -m lazymem.run COMMAND [ARGS]`.

    run [OVERRIDES]      a task: `lazymem run [task=NAME] [+experiment=NAME] [key=value]` (lazymem/runner.py)
    ls                   the tasks and the bundled experiments, one line each
    doctor [OVERRIDES]   what this machine can run: `run task=doctor`, without tracking
    serve [OVERRIDES]    the memory service over HTTP (lazymem/agent)
    mcp [OVERRIDES]      the memory service as an MCP server
    import | export ...  users' histories into and out of the service's store (lazymem/agent/transfer.py)

Without a command the arguments are a run's: `lazymem task=stats` is `lazymem run task=stats`. Each command
imports what it needs when it runs, so `lazymem ls` starts in a moment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def run(args: Sequence[str]) -> int:
    """A task, composed by Hydra from `args` (Hydra reads them from sys.argv); 0 once it returned (a failed
    run exits on its own, with its status)."""
    from lazymem.runner import main

    sys.argv[1:] = list(args)
    main()
    return 0


def doctor(args: Sequence[str]) -> int:
    return run(["task=doctor", "logger=none", *args])


def serve(args: Sequence[str]) -> int | None:
    from lazymem.agent.service import serve

    return serve(list(args))


def mcp(args: Sequence[str]) -> int | None:
    from lazymem.agent.mcp_server import main

    return main(list(args))


def transfer(kind: str) -> Callable[[Sequence[str]], int | None]:
    def command(args: Sequence[str]) -> int | None:
        from lazymem.agent.transfer import main

        return main(kind, list(args))

    return command


def ls(args: Sequence[str]) -> int:
    """The tasks (the task registry's) and the bundled experiments (conf/experiment/), each with the first
    clause of its description: the task module's docstring, the experiment's leading comment."""
    from lazymem import tasks
    from lazymem.conf import CONF_DIR

    if args:
        raise SystemExit(f"error: lazymem ls takes no arguments, got {' '.join(args)}")
    experiments = {p.stem: _comment(p) for p in sorted((CONF_DIR / "experiment").glob("*.yaml"))}
    width = max(map(len, [*tasks.NAMES, *experiments]))
    print("tasks (lazymem run task=NAME):")
    for name in tasks.NAMES:
        print(f"  {name:{width}}  {gist(tasks.describe(name))}")
    print("\nexperiments (lazymem run +experiment=NAME):")
    for name, comment in experiments.items():
        print(f"  {name:{width}}  {gist(comment)}")
    return 0


def _comment(path: Path) -> str:
    """A config file's leading comment, without its `@package` line."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            if lines:
                break
            continue
        if not line.startswith("# @package"):
            lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def gist(text: str) -> str:
    """The first clause of `text`: up to its first colon, semicolon or full stop outside brackets."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([") - (c in ")]")
        if depth == 0 and c in ":;." and text[i + 1 : i + 2] in (" ", ""):
            return text[:i]
    return text


COMMANDS: dict[str, Callable[[Sequence[str]], int | None]] = {
    "run": run,
    "ls": ls,
    "doctor": doctor,
    "serve": serve,
    "mcp": mcp,
    "import": transfer("import"),
    "export": transfer("export"),
}


def cli(argv: Sequence[str] | None = None) -> None:
    """The `lazymem` console script: the command's exit status. A reader that closes the pipe early
    (`lazymem ls | head`) ends the command quietly, as other Unix tools do, not with a traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS[args.pop(0)] if args and args[0] in COMMANDS else run
    try:
        status = command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the same error again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    cli()
