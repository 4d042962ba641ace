"""Write a tiny, randomly initialised Qwen3 and its tokenizer to a directory (lazymem/train/tiny_qwen3.py):

.venv/bin/python scripts/tiny_qwen3.py /tmp/tiny-qwen3 --hidden 256 --vocab 600
"""

import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the checkout, for Pythons without lazymem installed

from lazymem.train.tiny_qwen3 import main  # noqa: E402

if __name__ == "__main__":
    main()
