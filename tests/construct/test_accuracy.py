"""Per-category accuracy of KEEP/DROP decisions against gold, and the action reward made of it."""

from __future__ import annotations

import pytest

from lazymem.construct.accuracy import action_reward, category_accuracy

K, D = "KEEP", "DROP"


def test_action_reward_helpers():
    assert category_accuracy([True, False], [K, K]) == (1.0, 0.0)
    assert action_reward(1.0, 0.0, eta=0.5) == 0.5
    with pytest.raises(ValueError):
        category_accuracy([True], [K, D])
