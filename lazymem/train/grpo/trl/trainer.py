"""GRPOTrainer with VERL's token-mean per update, and a resume that keeps each epoch's prompt order.

Token-mean: VERL 0.9.1 divides an update's summed token losses by that update's own active tokens
(verl/workers/engine/automodel/transformer_impl.py:224-228 ``batch_num_tokens``, core_algos.py:1170-1175).
trl 1.16's ``dapo`` divides by the whole generation batch's tokens rescaled to one update
(grpo_trainer.py:3168-3173: ``num_items_in_batch`` x gradient_accumulation_steps / steps_per_generation), so
with two updates per batch an update of long replies gets a larger step than VERL's and one of short replies a
smaller one. :func:`per_update_items` gives each buffered micro-batch the ``num_items_in_batch`` that makes
TRL's normaliser its own update's tokens.

trl 1.16's RepeatSampler draws one permutation per pass from a generator seeded once (trl/trainer/utils.py:
925-933), so an uninterrupted run's epoch e takes the generator's (e+1)-th permutation. A resumed run builds a
fresh sampler, and transformers 5.10 neither replays the finished epochs' passes (trainer.py:1513, 1685-1695)
nor can TRL's sampler take an epoch: epoch 2 of a run resumed in epoch 2 would repeat epoch 1's order.
:class:`EpochRepeatSampler` takes the epoch the trainer sets on every pass (accelerate's DataLoaderShard.
set_epoch reaches the sampler) and reseeds to it, so any run, resumed or not, sees the same orders.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler


class EpochRepeatSampler(RepeatSampler):
    """RepeatSampler whose pass ``epoch`` draws the permutation an uninterrupted run draws in that pass."""

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle and self.seed is not None:  # unseeded, the order is not reproducible anyway
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):  # the passes before this one
                torch.randperm(self.num_samples, generator=self.generator)
        yield from super().__iter__()


def per_update_items(batches: list[dict], accumulation: int) -> list[torch.Tensor]:
    """For the micro-batches of one generation batch, in training order: the ``num_items_in_batch`` under
    which trl 1.16's dapo normaliser (``num_items_in_batch * accumulation / len(batches)``, one process)
    equals the active tokens of the update (``accumulation`` consecutive micro-batches) each belongs to."""
    tokens = []
    for b in batches:
        mask = b["completion_mask"] if b.get("tool_mask") is None else b["completion_mask"] * b["tool_mask"]
        tokens.append(mask.sum())
    out = []
    for start in range(0, len(batches), accumulation):
        update = torch.stack(tokens[start : start + accumulation]).sum()
        out += [update * len(batches) / accumulation] * len(tokens[start : start + accumulation])
    return out


class MemoryGrpoTrainer(GRPOTrainer):
    """GRPOTrainer with :class:`EpochRepeatSampler` (same arguments as TRL's) and per-update token-mean."""

    def _prepare_inputs(self, generation_batch):
        every = self.args.steps_per_generation * self.num_iterations
        fresh = self.model.training and (self._step % every == 0 or self._buffered_inputs is None)
        inputs = super()._prepare_inputs(generation_batch)  # one of self._buffered_inputs, by reference
        if fresh and self.loss_type == "dapo" and self.accelerator.num_processes == 1:
            accumulation = self.args.gradient_accumulation_steps
            items = per_update_items(self._buffered_inputs, accumulation)
            for batch, n in zip(self._buffered_inputs, items, strict=True):
                batch["num_items_in_batch"] = n
        return inputs

    def _get_train_sampler(self, dataset=None):
        own = super()._get_train_sampler(dataset)
        return EpochRepeatSampler(
            data_source=own.data_source,
            mini_repeat_count=own.mini_repeat_count,
            batch_size=own.batch_size,
            repeat_count=own.repeat_count,
            shuffle=own.shuffle,
            seed=own.seed,
        )
