"""zl.childenv: the environment of a run's children, derived from the run configuration in one place."""
import os
from dataclasses import replace

from zl import childenv
from zl.backends import get_backend
from zl.config import RunConfig


def test_a_runs_pytest_gets_the_caches_the_device_and_use_flagtune(tmp_path):
    store = tmp_path / ".flaggems_cache"
    cfg = replace(RunConfig(), triton_cache_dir="/tmp/tc", tuner_cache_dir=str(store),
                  device="3", use_flagtune=True)
    env = childenv.child_environ(cfg, get_backend("cuda"), parent={})
    assert env == {"PYTHONUNBUFFERED": "1", "USE_FLAGTUNE": "1", "TRITON_CACHE_DIR": "/tmp/tc",
                   "CUDA_VISIBLE_DEVICES": "3", "FLAGGEMS_CACHE_DIR": str(store),
                   "FLAGGEMS_DB_URL": f"sqlite:///{store}/config_cache/zl_isolated.db"}
    # FlagGems creates config_cache only for its default database; sqlite cannot open a file
    # under FLAGGEMS_DB_URL in a missing folder (upstream's amax test failed on the H100).
    assert (store / "config_cache").is_dir()
    # A visibility list the caller chose is kept; a shared tuner store is FlagGems' own.
    kept = childenv.child_environ(replace(cfg, tuner_cache_dir=""), get_backend("cuda"),
                                  parent={"CUDA_VISIBLE_DEVICES": "5,6"})
    assert "CUDA_VISIBLE_DEVICES" not in kept and "FLAGGEMS_DB_URL" not in kept
    assert childenv.child_environ(RunConfig(), get_backend("musa"), parent={})["USE_FLAGTUNE"] == "0"


def test_a_batch_case_starts_from_the_batchs_environment_minus_its_own_variables(monkeypatch):
    monkeypatch.setenv("OUT_DIR", "/elsewhere")
    monkeypatch.setenv("REPLAY_FROM", "/a/run")
    monkeypatch.setenv("ZL_L2", "cold")
    monkeypatch.delenv("ZL_ISOLATE_TUNER_CACHE", raising=False)
    base = childenv.batch_case_base({"USE_FLAGTUNE": "1"})
    assert "OUT_DIR" not in base and "REPLAY_FROM" not in base
    assert (base["ZL_L2"], base["ZL_ISOLATE_TUNER_CACHE"], base["USE_FLAGTUNE"]) == ("cold", "1", "1")
    monkeypatch.setenv("ZL_ISOLATE_TUNER_CACHE", "0")      # the user's word wins over the default
    assert childenv.batch_case_base()["ZL_ISOLATE_TUNER_CACHE"] == "0"
    env = childenv.batch_case_environ(get_backend("cuda"), "2", {"HIP_VISIBLE_DEVICES": "1", "A": "x"},
                                      {"OUT_DIR": "/case"})
    assert env == {"A": "x", "CUDA_VISIBLE_DEVICES": "2", "OUT_DIR": "/case"}


def test_setting_in_process_returns_the_previous_value(monkeypatch):
    monkeypatch.setenv("ZL_CHILDENV_PROBE", "before")
    assert childenv.set_in_process("ZL_CHILDENV_PROBE", "after") == "before"
    assert os.environ["ZL_CHILDENV_PROBE"] == "after"
    assert childenv.set_in_process("ZL_CHILDENV_PROBE", None) == "after"
    assert "ZL_CHILDENV_PROBE" not in os.environ
