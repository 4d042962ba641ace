"""+experiment=stage_ablation (paper Table 3): one job per training stage, each with its own memory model,
labelled by `stage` so that task=report builds Table 3 and the accuracy-by-stage plot. The stages evaluated
and reported on a CPU, as the training chain runs them: tests/e2e/test_chain_cpu.py."""

from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF

from helpers import run_cli


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["+experiment=stage_ablation", *overrides])


def test_each_stage_serves_its_own_checkpoint():
    models = {}
    for stage in ("base", "sft", "rl"):
        cfg = composed(f"stage={stage}", *(f"stages.{s}=/ckpt/{s}" for s in ("base", "sft", "rl")))
        assert cfg.task == "evaluate" and cfg.method.role == "memory"
        models[stage] = (cfg.llm.roles.memory.model, cfg.llm.roles.memory.served_name)
    assert models == {s: (f"/ckpt/{s}", f"lazymem-4b-{s}") for s in ("base", "sft", "rl")}


def test_the_sweep_is_defined_in_the_experiment():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=stage_ablation"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.stage == "base,sft,rl"


def test_a_stage_without_a_checkpoint_stops_before_starting(tmp_path):
    r = run_cli(
        "+experiment=stage_ablation_cpu",
        "stage=rl",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_RL_MODEL": None},
    )
    assert r.returncode != 0
    assert "llm.roles.memory.model is not set: pass stages.rl=" in r.stderr
    assert not (tmp_path / "records.jsonl").exists()
