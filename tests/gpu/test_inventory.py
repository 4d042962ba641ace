"""The GPUs a job sees (lazymem/gpu/inventory.py), from a fake nvidia-smi: numbered in CUDA_VISIBLE_DEVICES
order, node indices or UUIDs, and each GPU's size as sold."""

from __future__ import annotations

from types import SimpleNamespace

from lazymem.gpu import inventory
from lazymem.gpu.inventory import Gpu, gpu_inventory, sold_as
from lazymem.gpu.plans import place

from helpers_gpu import A100_40, H100, H200, L40S, job, large


def test_a_48gb_card_reporting_45_gib_counts_as_48_gb():
    assert [sold_as(g) for g in (L40S, A100_40, H100, 80.0, 93.6, H200)] == [48, 40, 80, 80, 94, 141]


def fake_smi(monkeypatch, out: str) -> None:
    monkeypatch.setattr(inventory.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        inventory.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout=out)
    )


SMI = "0, GPU-a0, 81920, 81000\n1, GPU-a1, 81920, 1000\n2, GPU-a2, 40960, 40960\n3, GPU-a3, 40960, 20000\n"


def test_the_inventory_numbers_the_gpus_as_the_job_sees_them(monkeypatch):
    fake_smi(monkeypatch, SMI)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g.index for g in gpu_inventory()] == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # SLURM's node-wide indices
    assert gpu_inventory() == [Gpu(0, 40.0, 40.0), Gpu(1, 40.0, 20000 / 1024)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a1,0")  # UUIDs too, in their order
    assert gpu_inventory() == [Gpu(0, 80.0, 1000 / 1024), Gpu(1, 80.0, 81000 / 1024)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_inventory() == []
    monkeypatch.setattr(inventory.shutil, "which", lambda _: None)
    assert gpu_inventory() == []


def test_a_slurm_job_on_the_nodes_gpus_2_and_3_gets_its_plan(models, monkeypatch):
    """Plans index the GPUs the job can see: the paper's plan fits a job given the node's GPUs 2 and 3."""
    fake_smi(monkeypatch, SMI.replace("40960", "81920"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    cfg, roles = job("main_table")
    inventory = gpu_inventory()
    assert [g.index for g in inventory] == [0, 1]
    found = place(cfg, [g._replace(free_gib=g.total_gib) for g in inventory], roles)
    assert found == [] and large(cfg)["gpus"] == "0"
