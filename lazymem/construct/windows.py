"""History windowing (paper Section 3.2): restore local context around retrieved messages.

Each retrieved message d is expanded to the span [idx(d) - w, idx(d) + w], clipped to the history.
Two chronologically adjacent retrieved messages share one window when idx(d_{i+1}) - idx(d_i) <= 2w,
applied transitively; this yields maximal windows that are contiguous and disjoint. A maximal window
longer than L messages is cut into sub-windows of at most L messages starting every s messages, so
consecutive sub-windows overlap by L - s messages (one, with the paper's L = 8, s = 7).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """A contiguous run of message indices sent to the memory model in one call.

    `core` holds the retrieved messages inside the window; the other members are bridges (context).
    `group` numbers the maximal window the sub-window was cut from, and `part` its position there.
    """

    idx: tuple[int, ...]
    core: tuple[int, ...]
    group: int
    part: int = 0

    def __post_init__(self):
        if not self.idx:
            raise ValueError("a window holds at least one message")
        if list(self.idx) != list(range(self.idx[0], self.idx[0] + len(self.idx))):
            raise ValueError(f"window indices must be contiguous and ascending, got {self.idx}")
        if any(i not in self for i in self.core) or list(self.core) != sorted(set(self.core)):
            raise ValueError(f"core {self.core} must be sorted, unique and inside the window {self.idx}")

    def __len__(self) -> int:
        return len(self.idx)

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and self.start <= i <= self.end

    @property
    def start(self) -> int:
        return self.idx[0]

    @property
    def end(self) -> int:
        """The last message index (inclusive)."""
        return self.idx[-1]

    @property
    def bridges(self) -> tuple[int, ...]:
        core = set(self.core)
        return tuple(i for i in self.idx if i not in core)


def _check_args(retrieved: Iterable[int], n_messages: int, radius: int) -> list[int]:
    """Validated, sorted, de-duplicated retrieved indices."""
    n_messages, radius = operator.index(n_messages), operator.index(radius)
    if n_messages < 0:
        raise ValueError(f"n_messages must be >= 0, got {n_messages}")
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    # operator.index accepts numpy integers and rejects floats and strings.
    indices = sorted({operator.index(i) for i in retrieved})
    bad = [i for i in indices if not 0 <= i < n_messages]
    if bad:
        raise ValueError(f"retrieved indices {bad[:5]} outside the history [0, {n_messages - 1}]")
    return indices


def expanded_indices(retrieved: Iterable[int], n_messages: int, radius: int) -> set[int]:
    """Every message index inside some expanded span: the context that windowing can show."""
    out: set[int] = set()
    for i in _check_args(retrieved, n_messages, radius):
        out.update(range(max(0, i - radius), min(n_messages - 1, i + radius) + 1))
    return out


def maximal_windows(retrieved: Iterable[int], n_messages: int, radius: int) -> list[Window]:
    """The merged windows before splitting, in chronological order (group = position)."""
    indices = _check_args(retrieved, n_messages, radius)
    runs: list[list[int]] = []
    for i in indices:
        if runs and i - runs[-1][-1] <= 2 * radius:
            runs[-1].append(i)
        else:
            runs.append([i])
    windows = []
    for group, run in enumerate(runs):
        start, end = max(0, run[0] - radius), min(n_messages - 1, run[-1] + radius)
        windows.append(Window(idx=tuple(range(start, end + 1)), core=tuple(run), group=group))
    return windows


def _check_split(max_len: int, stride: int) -> tuple[int, int]:
    max_len, stride = operator.index(max_len), operator.index(stride)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if not 1 <= stride <= max_len:
        raise ValueError(f"stride must satisfy 1 <= stride <= max_len ({max_len}), got {stride}")
    return max_len, stride


def split_window(window: Window, max_len: int = 8, stride: int = 7) -> list[Window]:
    """Cut one window into sub-windows of at most `max_len` messages, starting every `stride` messages.

    Cutting stops at the first sub-window that reaches the window's end, so none is contained in the
    one before it; only the last may be shorter than `max_len`.
    """
    max_len, stride = _check_split(max_len, stride)
    if len(window) <= max_len:
        return [window]
    parts = []
    for start in range(0, len(window), stride):
        idx = window.idx[start : start + max_len]
        core = tuple(i for i in window.core if idx[0] <= i <= idx[-1])
        parts.append(Window(idx=idx, core=core, group=window.group, part=len(parts)))
        if start + max_len >= len(window):
            break
    return parts


def build_windows(
    retrieved: Iterable[int], n_messages: int, radius: int, max_len: int = 8, stride: int = 7
) -> list[Window]:
    """The windows the memory model sees, chronological: maximal windows, each split to `max_len`.

    A sub-window may have an empty `core` (e.g. the short tail of a split window holding only
    trailing context); it is still sent, so every message of the expanded context gets a decision.
    """
    _check_split(max_len, stride)  # fail early, even when nothing needs splitting
    return [
        part
        for w in maximal_windows(retrieved, n_messages, radius)
        for part in split_window(w, max_len, stride)
    ]
