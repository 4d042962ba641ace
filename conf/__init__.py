"""The config tree that `lazymem` composes (Hydra's `pkg://lazymem.conf`), shipped inside the package.

Add your own config folder with Hydra's search path (docs/configuration.md, "Your own configs").
"""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent
