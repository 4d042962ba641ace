"""The one entry point: `python -m lazymem.run [task=NAME] [+experiment=NAME] [overrides]` (see runner.py)."""

import sys

from lazymem.runner import main

if __name__ == "__main__":
    sys.exit(main() and 0)
