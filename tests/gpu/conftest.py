"""Fixtures of the GPU plans' tests."""

import pytest

from helpers_llm import paper_model_dirs


@pytest.fixture
def models(tmp_path, monkeypatch):
    """The paper's model directories (config.json only), each experiment's model variable pointing at one."""
    return paper_model_dirs(tmp_path, monkeypatch)
