"""zl.seed + _seed_plugin: repeatable draws, the fallback message, restore at unconfigure."""

import random

import numpy as np
import torch

import _seed_plugin as sp
from harness.fake_config import FakeConfig
from zl.seed import DEFAULT_SEED, apply_seeds, seed_value


def _draws():
    return (random.random(), np.random.rand(), torch.rand(1).item())


def test_seeds_make_draws_repeatable(monkeypatch):
    apply_seeds(seed_value("7"))
    first = _draws()
    apply_seeds(seed_value("7"))
    assert _draws() == first


def test_bad_seed_falls_back_with_message(capsys):
    assert seed_value("abc") == DEFAULT_SEED
    assert "not an integer" in capsys.readouterr().err


def test_plugin_seeds_each_test_and_restores_host_generators(monkeypatch):
    monkeypatch.setenv("ZL_SEED", "11")
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    expected_after = _draws()
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    config = FakeConfig(sp, zl_seed="5")  # the command line wins over ZL_SEED
    sp.pytest_configure(config)
    session = config.pluginmanager.get_plugin(sp.NAME)
    assert session.seed == 5
    apply_seeds(5)
    seeded = _draws()
    _draws()
    session.pytest_runtest_setup(None)
    assert _draws() == seeded
    sp.pytest_unconfigure(config)
    assert config.pluginmanager.get_plugin(sp.NAME) is None
    assert _draws() == expected_after  # as if the session had never seeded
    from_env = FakeConfig(sp)
    sp.pytest_configure(from_env)
    assert from_env.pluginmanager.get_plugin(sp.NAME).seed == 11
    sp.pytest_unconfigure(from_env)
