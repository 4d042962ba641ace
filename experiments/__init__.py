"""What defines each paper experiment beyond its config (conf/experiment/NAME.yaml): the paper's reference
numbers per table (NAME.json, shown beside ours in reports) and a page per experiment (NAME.md: what it
reproduces, its command, its cost, its outputs). Shipped inside the package as `lazymem.experiments`."""

from pathlib import Path

EXPERIMENTS_DIR = Path(__file__).resolve().parent
