"""The training sampler of lazymem/train/grpo/trl/trainer.py: a resumed run sees each epoch's prompts in the
order an uninterrupted run does (the training runs that check the weights are in trl/test_run.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from trl.trainer.utils import RepeatSampler  # noqa: E402

from lazymem.train.grpo.trl.trainer import EpochRepeatSampler, per_update_items  # noqa: E402

ARGS = {
    "data_source": list(range(12)),
    "mini_repeat_count": 2,
    "batch_size": 3,
    "repeat_count": 2,
    "seed": 42,
}


def passes(sampler, epochs):
    out = []
    for epoch in epochs:
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def test_a_fresh_sampler_set_to_epoch_e_draws_what_an_uninterrupted_run_draws_in_pass_e():
    uninterrupted = passes(EpochRepeatSampler(**ARGS), range(3))
    assert uninterrupted == passes(RepeatSampler(**ARGS), range(3))  # TRL's own orders, pass by pass
    assert len({tuple(p) for p in uninterrupted}) == 3  # three different orders
    for epoch in (1, 2):  # a run resumed in epoch `epoch` builds a new sampler
        assert passes(EpochRepeatSampler(**ARGS), [epoch]) == [uninterrupted[epoch]]
    # TRL's sampler, rebuilt on resume, starts again at the first pass's order (the defect)
    assert passes(RepeatSampler(**ARGS), [1]) == [uninterrupted[0]]


def test_an_unshuffled_or_unseeded_sampler_is_left_alone():
    plain = EpochRepeatSampler(**{**ARGS, "shuffle": False})
    plain.set_epoch(2)
    assert list(plain) == list(RepeatSampler(**{**ARGS, "shuffle": False}))
    unseeded = EpochRepeatSampler(**{**ARGS, "seed": None})
    unseeded.set_epoch(1)
    assert sorted(set(unseeded)) == list(range(12))


def test_each_update_is_normalised_by_its_own_tokens():
    """Four micro-batches, two per update: TRL's dapo normaliser num_items x 2 / 4 becomes each update's own
    active tokens (5 + 1 and 2 + 0; a tool mask hides tokens), not the batch's mean per update (4)."""
    import torch

    def batch(active, tools=None):
        mask = torch.tensor([[1] * active + [0] * (5 - active)])
        return {"completion_mask": mask, "tool_mask": None if tools is None else torch.tensor([tools])}

    batches = [batch(5), batch(1), batch(3, [1, 1, 0, 0, 0]), batch(0)]
    items = per_update_items(batches, 2)
    normaliser = [float(n) * 2 / 4 for n in items]
    assert normaliser == [6.0, 6.0, 2.0, 2.0]
