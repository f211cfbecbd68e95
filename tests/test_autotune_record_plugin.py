"""Autotune record / replay (`_autotune_record_plugin` over `zl.autotune`).

In-process tests drive the plugin's hooks directly around real `@triton.autotune`
kernels run by the Triton interpreter on CPU tensors. The tuner gets a planted
`do_bench` whose timings are chosen by the test, so the winner is known in
advance and a replay that silently re-tunes would pick a different config.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import _autotune_record_plugin as plug  # noqa: E402
from harness.pluginconfig import PluginConfig  # noqa: E402
from zl import markers  # noqa: E402
from zl.autotune import RECORD_DIR_ENV, REPLAY_DIR_ENV  # noqa: E402
from zl.autotune.options import PRESWEPT  # noqa: E402
from zl.autotune.configs import config_to_dict, key_to_str, off_candidates, record_dict  # noqa: E402
from zl.autotune.isolation import isolation_problems  # noqa: E402

MARKER = markers.REPLAY_FALLBACK
FOREIGN = markers.REPLAY_FOREIGN_CONFIG

REPO = Path(__file__).resolve().parents[1]
KERNEL = f"{__name__}.add_one"
CONFIGS = [
    triton.Config({"BLOCK": 16}, num_warps=1),
    triton.Config({"BLOCK": 32}, num_warps=2),
    triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2),
]


@triton.jit
def add_one(x, y, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


class PlantedBench:
    """do_bench stand-in: the i-th config benchmarked in a sweep gets times[i]."""

    def __init__(self, times):
        self.times = list(times)
        self.calls = 0

    def __call__(self, kernel_call, quantiles=None):
        kernel_call()
        t = self.times[self.calls % len(self.times)]
        self.calls += 1
        return [t, t, t]


def make_tuner(times=(3.0, 1.0, 2.0), configs=CONFIGS):
    bench = PlantedBench(times)
    tuner = triton.autotune(configs=list(configs), key=["n"], do_bench=bench)(add_one)
    return tuner, bench


def launch(tuner, n):
    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty_like(x)
    tuner[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    assert torch.equal(y, x + 1)


_CONFIG = {"current": None}


def configure(**options):
    """One plugin session: a fresh stand-in config, the module's real hooks."""
    _CONFIG["current"] = PluginConfig(plug, options)
    plug.pytest_configure(_CONFIG["current"])
    return _CONFIG["current"]


def unconfigure():
    if _CONFIG["current"] is not None:
        plug.pytest_unconfigure(_CONFIG["current"])
        _CONFIG["current"] = None


@pytest.fixture
def env(tmp_path, monkeypatch):
    for k in (RECORD_DIR_ENV, REPLAY_DIR_ENV,
              "ZL_ISOLATE_TUNER_CACHE", "FLAGGEMS_DB_URL", "FLAGGEMS_CACHE_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ZL_OP", "add_one")
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    monkeypatch.setenv("OUT_DIR", str(tmp_path / "run"))
    yield tmp_path
    unconfigure()


def identity(tmp_path):
    p = tmp_path / "run" / "run_identity.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def record_session(tmp_path, monkeypatch, sizes, times=(3.0, 1.0, 2.0), name="A"):
    rec = tmp_path / name / "autotune_records"
    monkeypatch.setenv(RECORD_DIR_ENV, str(rec))
    monkeypatch.delenv(REPLAY_DIR_ENV, raising=False)
    configure()
    tuner, bench = make_tuner(times)
    for n in sizes:
        launch(tuner, n)
    unconfigure()
    monkeypatch.delenv(RECORD_DIR_ENV)
    return rec, tuner, bench


def replay_session(monkeypatch, rec, sizes, times=(1.0, 2.0, 3.0), tuner=None):
    monkeypatch.setenv(REPLAY_DIR_ENV, str(rec))
    configure()
    bench = None
    if tuner is None:
        tuner, bench = make_tuner(times)
    used = {}
    for n in sizes:
        launch(tuner, n)
        used[n] = config_to_dict(tuner.best_config)
    unconfigure()
    return used, tuner, bench


def test_record_then_replay_gives_identical_configs(env, monkeypatch, capfd):
    rec, tuner, _ = record_session(env, monkeypatch, [100, 300, 100])
    assert identity(env)["autotune_mode"] == "record"
    doc = json.loads((rec / "add_one.json").read_text())
    assert set(doc) == {KERNEL}
    assert set(doc[KERNEL]) == {"100,torch.float32,torch.float32", "300,torch.float32,torch.float32"}
    entry = doc[KERNEL]["100,torch.float32,torch.float32"]
    assert entry["kwargs"] == {"BLOCK": 32} and entry["num_warps"] == 2  # planted winner
    assert entry["pre_hook"] is False and "num_ctas" in entry and "maxnreg" in entry
    meta = json.loads((rec / "meta.json").read_text())
    assert meta["backend"] == "cuda" and meta["op"] == "add_one" and meta["provider"] == "flaggems"

    # Live tuning on side B would now pick BLOCK=16 (times reversed): replay must not.
    used, _, bench = replay_session(monkeypatch, rec, [100, 300])
    assert bench.calls == 0, "replay benchmarked configs: it tuned instead of replaying"
    for n in (100, 300):
        assert used[n] == doc[KERNEL][f"{n},torch.float32,torch.float32"]
    assert identity(env)["autotune_mode"] == "replay"
    err = capfd.readouterr().err
    assert MARKER not in err and FOREIGN not in err and "replay_foreign_configs" not in identity(env)
    used_file = env / "run" / "autotune_records" / "add_one.used.json"
    assert json.loads(used_file.read_text()) == doc  # what the replay ran == the record


def test_replay_overrides_a_warm_cache(env, monkeypatch):
    """The injection is unconditional: a cache that already holds another winner
    (LibTuner's sqlite, Triton's disk cache) must not win over the record."""
    rec, _, _ = record_session(env, monkeypatch, [100])
    tuner, bench = make_tuner((1.0, 2.0, 3.0))
    launch(tuner, 100)  # warm the tuner's own cache with BLOCK=16 before replay
    assert tuner.best_config.kwargs == {"BLOCK": 16}
    used, _, _ = replay_session(monkeypatch, rec, [100], tuner=tuner)
    assert used[100]["kwargs"] == {"BLOCK": 32}


def test_missing_key_gives_exactly_one_marker_and_tunes_live(env, monkeypatch, capfd):
    rec, _, _ = record_session(env, monkeypatch, [100])
    capfd.readouterr()
    used, _, bench = replay_session(monkeypatch, rec, [100, 200, 200, 200])
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(MARKER)]
    assert lines == [f"{MARKER} op=add_one kernel={KERNEL} "
                     "key=200,torch.float32,torch.float32 reason=key_missing"]
    assert bench.calls == 3 and used[200]["kwargs"] == {"BLOCK": 16}  # live winner
    assert identity(env)["autotune_mode"] == "replay_fallback"


def test_warm_cache_is_still_recorded(env, monkeypatch):
    """A cache hit adds no key; the record must read the used config back anyway."""
    tuner, bench = make_tuner()
    launch(tuner, 100)  # tuned before recording starts: the recording run only hits
    assert bench.calls == 3
    rec = env / "A" / "autotune_records"
    monkeypatch.setenv(RECORD_DIR_ENV, str(rec))
    configure()
    launch(tuner, 100)
    assert bench.calls == 3  # really a warm hit
    unconfigure()
    doc = json.loads((rec / "add_one.json").read_text())
    assert doc[KERNEL]["100,torch.float32,torch.float32"]["kwargs"] == {"BLOCK": 32}


def test_backend_mismatch_is_refused(env, monkeypatch, capfd):
    rec, _, _ = record_session(env, monkeypatch, [100])
    meta = json.loads((rec / "meta.json").read_text())
    meta["backend"] = "musa"
    (rec / "meta.json").write_text(json.dumps(meta))
    capfd.readouterr()
    used, _, bench = replay_session(monkeypatch, rec, [100])
    err = capfd.readouterr().err
    assert (f"{MARKER} op=add_one kernel=* key=* reason=backend_mismatch "
            "recorded=musa current=cuda") in err
    assert bench.calls == 3 and used[100]["kwargs"] == {"BLOCK": 16}  # tuned live
    assert identity(env)["autotune_mode"] == "replay_fallback"


def test_record_and_replay_both_set_is_a_loud_noop(env, monkeypatch, capfd):
    original = triton.runtime.autotuner.Autotuner.run
    monkeypatch.setenv(RECORD_DIR_ENV, str(env / "r"))
    monkeypatch.setenv(REPLAY_DIR_ENV, str(env / "p"))
    configure()
    assert "both" in capfd.readouterr().err
    assert triton.runtime.autotuner.Autotuner.run is original
    assert identity(env)["autotune_mode"] == "uncontrolled"
    assert not (env / "r").exists()


def test_neither_set_is_uncontrolled(env):
    configure()
    assert identity(env)["autotune_mode"] == "uncontrolled"


def test_triton_without_autotuner_fails_soft(env, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "triton.runtime.autotuner", types.ModuleType("stub"))
    monkeypatch.setenv(RECORD_DIR_ENV, str(env / "r"))
    configure()
    assert "Autotuner unavailable" in capfd.readouterr().err
    assert identity(env)["autotune_mode"] == "uncontrolled"


def test_unconfigure_restores_every_patch(env, monkeypatch):
    at = triton.runtime.autotuner.Autotuner
    before_run = at.__dict__["run"]
    had_init = "__init_subclass__" in at.__dict__

    class Early(at):
        def run(self, *a, **k):
            return super().run(*a, **k)

    early_run = Early.__dict__["run"]
    monkeypatch.setenv(RECORD_DIR_ENV, str(env / "r"))
    configure()
    assert at.__dict__["run"] is not before_run and Early.__dict__["run"] is not early_run

    class Late(at):
        def run(self, *a, **k):
            return super().run(*a, **k)

    late_run = Late.run.__wrapped__
    unconfigure()
    assert at.__dict__["run"] is before_run
    assert Early.__dict__["run"] is early_run and Late.__dict__["run"] is late_run
    assert ("__init_subclass__" in at.__dict__) == had_init


class FakeSqlCache:
    """The shape of FlagGems' ConfigCache: not a dict, looked up by `in` / []."""

    def __init__(self):
        self.rows = {}

    def __contains__(self, key):
        return repr(key) in self.rows

    def __getitem__(self, key):
        return self.rows[repr(key)]

    def __setitem__(self, key, cfg):
        self.rows[repr(key)] = triton.Config(dict(cfg.kwargs), num_warps=cfg.num_warps,
                                             num_stages=cfg.num_stages)


def libtuner_class():
    """A LibTuner look-alike created *after* configure (as `import flag_gems` does)
    that overrides run() without calling super().run() and keys by a strategy."""
    base = triton.runtime.autotuner.Autotuner

    class LibTunerLike(base):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.cache = FakeSqlCache()

        def run(self, *args, **kwargs):
            self.nargs = nargs = dict(zip(self.arg_names, args))
            key = (triton.next_power_of_2(nargs["n"]), "torch.float32")  # align strategy
            if key not in self.cache:
                timings = {c: self._bench(*args, config=c, **kwargs) for c in self.configs}
                self.cache[key] = min(timings, key=timings.get)
            config = self.cache[key]
            self.best_config = config
            return self.fn.run(*args, **kwargs, **config.all_kwargs())

    return LibTunerLike


def test_libtuner_subclass_created_after_configure_is_recorded_and_replayed(env, monkeypatch, capfd):
    rec = env / "A" / "autotune_records"
    monkeypatch.setenv(RECORD_DIR_ENV, str(rec))
    configure()
    cls = libtuner_class()
    bench = PlantedBench((3.0, 1.0, 2.0))
    tuner = cls(add_one, add_one.arg_names, list(CONFIGS), ["n"], None, None, do_bench=bench)
    launch(tuner, 100)
    launch(tuner, 120)  # same aligned key (128): one record
    unconfigure()
    monkeypatch.delenv(RECORD_DIR_ENV)
    doc = json.loads((rec / "add_one.json").read_text())
    assert doc[KERNEL] == {"128,torch.float32": doc[KERNEL]["128,torch.float32"]}
    assert doc[KERNEL]["128,torch.float32"]["kwargs"] == {"BLOCK": 32}

    monkeypatch.setenv(REPLAY_DIR_ENV, str(rec))
    configure()
    bench2 = PlantedBench((1.0, 2.0, 3.0))
    tuner2 = libtuner_class()(add_one, add_one.arg_names, list(CONFIGS), ["n"], None, None,
                              do_bench=bench2)
    launch(tuner2, 100)
    assert bench2.calls == 0 and tuner2.best_config.kwargs == {"BLOCK": 32}
    assert tuner2.cache.rows == {}, "replay wrote into the tuner's persistent cache"
    assert MARKER not in capfd.readouterr().err


def test_pre_hook_config_is_restored_or_refused(env, monkeypatch, capfd):
    hooked = [triton.Config({"BLOCK": 16}, num_warps=1),
              triton.Config({"BLOCK": 32}, num_warps=2, pre_hook=lambda nargs: None)]
    rec = env / "A" / "autotune_records"
    monkeypatch.setenv(RECORD_DIR_ENV, str(rec))
    configure()
    launch(triton.autotune(hooked, key=["n"], do_bench=PlantedBench((2.0, 1.0)))(add_one), 100)
    unconfigure()
    monkeypatch.delenv(RECORD_DIR_ENV)
    entry = json.loads((rec / "add_one.json").read_text())[KERNEL]["100,torch.float32,torch.float32"]
    assert entry["pre_hook"] is True

    monkeypatch.setenv(REPLAY_DIR_ENV, str(rec))
    configure()
    same = triton.autotune(hooked, key=["n"], do_bench=PlantedBench((1.0, 2.0)))(add_one)
    launch(same, 100)
    assert same.best_config is hooked[1]  # the original object, hook included
    # A config space that lost the hooked config cannot be replayed faithfully.
    other = triton.autotune(CONFIGS[:2], key=["n"], do_bench=PlantedBench((1.0, 2.0)))(add_one)
    launch(other, 100)
    unconfigure()
    assert "reason=pre_hook_lost" in capfd.readouterr().err


def test_edited_record_outside_the_search_space_is_injected_and_flagged(env, monkeypatch, capfd):
    rec, _, _ = record_session(env, monkeypatch, [100, 300])
    path = rec / "add_one.json"
    doc = json.loads(path.read_text())
    doc[KERNEL]["100,torch.float32,torch.float32"]["num_warps"] = 8
    path.write_text(json.dumps(doc))
    capfd.readouterr()
    used, _, _ = replay_session(monkeypatch, rec, [100, 300, 100])
    assert used[100]["num_warps"] == 8 and used[100]["kwargs"] == {"BLOCK": 32}
    # one line per key, for the edited key only; the run still counts as a replay
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith(FOREIGN)]
    assert lines == [f"{FOREIGN} op=add_one kernel={KERNEL} key=100,torch.float32,torch.float32 "
                     "reason=not_a_candidate"]
    ident = identity(env)
    assert ident["autotune_mode"] == "replay" and ident["replay_replayed_keys"] == 2
    assert ident["replay_foreign_configs"] == [
        {"kernel": KERNEL, "key": "100,torch.float32,torch.float32", "reason": "not_a_candidate"}]


def test_off_candidates_names_why_a_config_is_not_the_tuners():
    listed = [config_to_dict(c) for c in CONFIGS]
    assert off_candidates(listed[1], CONFIGS) is None
    assert off_candidates({**listed[1], "num_warps": 8}, CONFIGS) == "not_a_candidate"
    assert off_candidates({**listed[1], "kwargs": {"BLOCK": 48}}, CONFIGS) == "not_a_candidate"
    assert off_candidates({**listed[1], "kwargs": {"BLOCK": 32, "SPLIT": 2}}, CONFIGS) == "unknown_kwargs"
    # an attribute only one Triton build has (FlagTree's warp specialisation) is not a difference
    assert off_candidates({**listed[1], "num_consumer_groups": 2}, CONFIGS) is None
    assert off_candidates(listed[1], []) is None   # no list: nothing to judge against


def _run_in(monkeypatch, out: Path, record: bool = False, replay_from: Path = None,
            times=(3.0, 1.0, 2.0), sizes=(100,)):
    """One plugin session whose OUT_DIR is `out`, recording there or replaying `replay_from`."""
    monkeypatch.setenv("OUT_DIR", str(out))
    for var, value in ((RECORD_DIR_ENV, out / "autotune_records" if record else None),
                       (REPLAY_DIR_ENV, replay_from / "autotune_records" if replay_from else None)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))
    configure()
    tuner, _ = make_tuner(times)
    for n in sizes:
        launch(tuner, n)
    unconfigure()
    return json.loads((out / "run_identity.json").read_text())


def test_each_side_records_the_record_it_ran_and_the_guard_pairs_only_those(env, monkeypatch):
    from zl.autotune.records import digest
    from zl.runlog.caliber import complaints

    a, b, c = env / "A", env / "B", env / "C"
    ia = _run_in(monkeypatch, a, record=True)
    assert ia["autotune_record_digest"] == digest(json.loads((a / "autotune_records" / "add_one.json").read_text()))
    ic = _run_in(monkeypatch, c, record=True, times=(1.0, 2.0, 3.0))   # another winner, another record
    assert ic["autotune_record_digest"] != ia["autotune_record_digest"] and ic["run_id"] != ia["run_id"]
    ib = _run_in(monkeypatch, b, replay_from=a)
    assert ib["replay_record_digest"] == ib["replay_source_record_digest"] == ia["autotune_record_digest"]
    assert ib["replay_source_run_id"] == ia["run_id"] and ib["replay_source_dir"] == str(a.resolve())

    def link(x, y):
        return [p for p in complaints([("before", x), ("after", y)]) if "autotune record link" in p]
    assert link(a, b) == []
    assert len(link(c, b)) == 1

    # the record edited after A wrote it: the replay says so itself
    path = a / "autotune_records" / "add_one.json"
    doc = json.loads(path.read_text())
    doc[KERNEL]["100,torch.float32,torch.float32"]["kwargs"] = {"BLOCK": 64}
    path.write_text(json.dumps(doc))
    ie = _run_in(monkeypatch, env / "E", replay_from=a)
    assert ie["replay_record_digest"] == digest(doc) != ie["replay_source_record_digest"]
    assert any("was edited or rewritten" in p for p in link(a, env / "E"))


@pytest.mark.parametrize("record", ["{}", "foreign"])
def test_a_replay_that_replayed_no_key_is_a_whole_run_fallback(env, monkeypatch, capfd, record):
    """An emptied record, or another operator's: every key tunes live, nothing is pinned."""
    a = env / "A"
    _run_in(monkeypatch, a, record=True)
    path = a / "autotune_records" / "add_one.json"
    doc = json.loads(path.read_text())
    path.write_text("{}" if record == "{}" else json.dumps({"other_op.kernel": doc[KERNEL]}))
    capfd.readouterr()
    ib = _run_in(monkeypatch, env / "B", replay_from=a, sizes=(100, 300))
    assert ib["autotune_mode"] == "replay_fallback" and ib["replay_replayed_keys"] == 0
    assert ib["replay_fallback_keys"] == 2
    assert (ib["replay_fallback_scope"], ib["replay_fallback_reason"]) == ("all", "no_key_replayed")
    assert "!!! no recorded config was replayed (2 key(s) tuned live)" in capfd.readouterr().err


def test_unreadable_record_is_a_named_fallback(env, monkeypatch, capfd):
    rec = env / "A" / "autotune_records"
    rec.mkdir(parents=True)
    (rec / "add_one.json").write_text("{not json")
    monkeypatch.setenv(REPLAY_DIR_ENV, str(rec))
    configure()
    err = capfd.readouterr().err
    assert "reason=unreadable_record" in err and "not valid JSON" in err
    assert identity(env)["autotune_mode"] == "replay_fallback"


# ----------------------------- autotune_mode is what ran, never the intent

@pytest.mark.parametrize("damage,reason", [
    ("no_dir", "missing_records"),          # REPLAY_FROM run left no autotune_records/
    ("no_file", "missing_record"),          # ... or nothing for this op
    ("truncated", "unreadable_record"),     # cut mid-write
    ("not_configs", "unreadable_record"),   # valid JSON, not {kernel: {key: config}}
    ("other_backend", "backend_mismatch"),
])
def test_an_unusable_replay_record_is_a_whole_run_fallback(env, monkeypatch, capfd, damage, reason):
    rec, _, _ = record_session(env, monkeypatch, [100])
    path = rec / "add_one.json"
    if damage == "no_dir":
        rec = env / "never_recorded" / "autotune_records"
    elif damage == "no_file":
        path.unlink()
    elif damage == "truncated":
        path.write_text(path.read_text()[:40])
    elif damage == "not_configs":
        path.write_text(json.dumps({KERNEL: {"100,torch.float32,torch.float32": 32}}))
    else:
        (rec / "meta.json").write_text(json.dumps({"backend": "rocm"}))
    capfd.readouterr()
    used, _, bench = replay_session(monkeypatch, rec, [100])
    err = capfd.readouterr().err
    assert f"{MARKER} op=add_one kernel=* key=* reason={reason}" in err
    assert bench.calls == 3 and used[100]["kwargs"] == {"BLOCK": 16}  # tuned live
    ident = identity(env)
    assert ident["autotune_mode"] == "replay_fallback"
    assert ident["replay_fallback_scope"] == "all" and ident["replay_fallback_reason"] == reason


def test_a_partial_replay_counts_its_fallback_keys(env, monkeypatch, capfd):
    rec, _, _ = record_session(env, monkeypatch, [100, 300])
    used, _, _ = replay_session(monkeypatch, rec, [100, 300, 200, 400, 200])
    ident = identity(env)
    assert ident["autotune_mode"] == "replay_fallback" and ident["replay_fallback_scope"] == "keys"
    assert "replay_fallback_reason" not in ident
    assert ident["replay_fallback_keys"] == 2 and ident["replay_replayed_keys"] == 2
    assert ident["replay_fallback_kernels"] == {KERNEL: 2}
    assert ident["replay_fallback_reasons"] == {"key_missing": 2}


def test_the_plugin_overrides_the_shells_intent(env, monkeypatch):
    """run_pytest.sh's stub may have claimed `replay`; the plugin writes what ran."""
    from zl.identity import update_identity

    update_identity(str(env / "run"), autotune_mode="replay")
    monkeypatch.setenv(REPLAY_DIR_ENV, str(env / "missing"))
    configure()
    assert identity(env)["autotune_mode"] == "replay_fallback"
    unconfigure()
    monkeypatch.delenv(REPLAY_DIR_ENV)
    update_identity(str(env / "run"), autotune_mode="replay")
    configure()
    assert identity(env)["autotune_mode"] == "uncontrolled"
    assert identity(env)["autotune_mode_reason"] == "no_dir"


def test_options_work_without_the_environment(env, monkeypatch):
    rec, _, _ = record_session(env, monkeypatch, [100])
    monkeypatch.delenv("ZL_OP")
    monkeypatch.delenv("OUT_DIR")
    out = env / "other_run"
    configure(zl_autotune_replay_dir=str(rec), zl_op="add_one", zl_out_dir=str(out))
    tuner, bench = make_tuner((1.0, 2.0, 3.0))
    launch(tuner, 100)
    unconfigure()
    assert bench.calls == 0 and tuner.best_config.kwargs == {"BLOCK": 32}
    assert json.loads((out / "run_identity.json").read_text())["autotune_mode"] == "replay"
    assert (out / "autotune_records" / "add_one.used.json").is_file()


def test_an_unknown_backend_is_a_usage_error(env, monkeypatch):
    monkeypatch.setenv("ZL_BACKEND", "tpu")
    monkeypatch.setenv(RECORD_DIR_ENV, str(env / "r"))
    with pytest.raises(pytest.UsageError, match="unknown ZL_BACKEND 'tpu'"):
        configure()
    _CONFIG["current"] = None


def test_the_session_lives_on_a_registered_object_and_leaves_nothing_behind(env, monkeypatch):
    """State on the registered object; tuners and FlagGems' LibEntry caches as before."""
    class LibEntry:
        def __init__(self):
            self.kernel_cache = {"earlier": "cfg"}

    fake = types.ModuleType("flag_gems.utils.libentry")
    fake.LibEntry = LibEntry
    monkeypatch.setitem(sys.modules, "flag_gems.utils.libentry", fake)
    entry = LibEntry()
    per_device = LibEntry()
    per_device.kernel_cache = ({"d0": 1}, {"d1": 2})
    tuner, _ = make_tuner()
    before = set(vars(tuner))
    monkeypatch.setenv(RECORD_DIR_ENV, str(env / "r"))
    config = configure()
    plugin = config.pluginmanager.get_plugin(plug.NAME)
    assert plugin is not None and plugin.session.mode == "record"
    assert entry.kernel_cache == {} and per_device.kernel_cache == ({}, {})  # no earlier pick bypasses
    entry.kernel_cache["this session"] = "cfg"
    launch(tuner, 100)
    unconfigure()
    assert config.pluginmanager.get_plugin(plug.NAME) is None
    assert entry.kernel_cache == {"earlier": "cfg"} and per_device.kernel_cache == ({"d0": 1}, {"d1": 2})
    assert not [a for a in set(vars(tuner)) - before if a.startswith("_zl")]


def test_nothing_is_registered_when_inactive(env):
    config = configure()
    assert config.pluginmanager.get_plugin(plug.NAME) is None
    assert identity(env)["autotune_mode"] == "uncontrolled"
    assert not getattr(triton.runtime.autotuner.Autotuner.__dict__["run"], "_zl_wrapped", False)


def test_preswept_records_seed_a_recording_run(env, monkeypatch, capfd):
    rec = env / "A" / "autotune_records"
    rec.mkdir(parents=True)
    cfg = config_to_dict(triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2))
    (rec / "add_one.json").write_text(json.dumps(
        {KERNEL: {"100,torch.float32,torch.float32": cfg}, "other.kernel": {"1": cfg}}))
    monkeypatch.setenv(RECORD_DIR_ENV, str(rec))
    # The parallel sweep's hand-over, in the session's stash (set by its tryfirst configure).
    _CONFIG["current"] = PluginConfig(plug, {})
    _CONFIG["current"].stash[PRESWEPT] = True
    plug.pytest_configure(_CONFIG["current"])
    tuner, bench = make_tuner()
    launch(tuner, 100)
    assert bench.calls == 0 and tuner.best_config.kwargs == {"BLOCK": 64}
    launch(tuner, 300)  # a hole in the sweep: marker, live tune, and recorded
    unconfigure()
    assert "key=300,torch.float32,torch.float32 reason=key_missing" in capfd.readouterr().err
    doc = json.loads((rec / "add_one.json").read_text())
    assert set(doc[KERNEL]) == {"100,torch.float32,torch.float32", "300,torch.float32,torch.float32"}
    assert "other.kernel" in doc
    assert identity(env)["autotune_mode"] == "record"


def test_key_text_is_stable_across_representations():
    assert key_to_str((128, torch.float16, "torch.float16", True, None, 0.5)) == \
        "128,torch.float16,torch.float16,True,None,0.5"
    assert key_to_str(()) == "-"


def test_isolation_check(env, monkeypatch, capfd):
    monkeypatch.setenv("ZL_ISOLATE_TUNER_CACHE", "1")
    private = env / "fg" / "config_cache" / "x.db"
    monkeypatch.setenv("FLAGGEMS_DB_URL", f"sqlite:///{private}")
    libentry = types.ModuleType("flag_gems.utils.libentry")
    libentry.libcache = types.SimpleNamespace(db_url=f"sqlite:///{private}")
    monkeypatch.setitem(sys.modules, "flag_gems.utils.libentry", libentry)
    assert isolation_problems(True, loaded_early=[]) == []
    assert "flag_gems was imported before" in isolation_problems(True, ["flag_gems"])[0]
    libentry.libcache = types.SimpleNamespace(db_url="sqlite:////root/.flaggems/config_cache/T.db")
    (warning,) = isolation_problems(True, loaded_early=[])
    assert "not the private" in warning
    monkeypatch.setattr(plug, "LOADED_AT_PLUGIN_IMPORT", ())
    configure()  # the plugin prints what the check found
    assert "!!! WARNING ZL_ISOLATE_TUNER_CACHE=1 but the tuner store is" in capfd.readouterr().err
    unconfigure()
    monkeypatch.setenv("ZL_ISOLATE_TUNER_CACHE", " 0")  # the one switch parser: ' 0' is off
    monkeypatch.setattr(plug, "LOADED_AT_PLUGIN_IMPORT", ("flag_gems",))
    configure()
    assert "WARNING" not in capfd.readouterr().err
    assert isolation_problems(False, loaded_early=["flag_gems"]) == []


CRASH_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    os.environ["TRITON_INTERPRET"] = "1"
    import test_autotune_record_plugin as t
    t.configure()
    tuner, _ = t.make_tuner()
    t.launch(tuner, 100)
    how = sys.argv[1]
    if how == "raise":
        raise RuntimeError("operator crashed after tuning")
    if how == "exit":
        sys.exit(3)
    os._exit(4)
""")


@pytest.mark.parametrize("how,rc,persisted", [("raise", 1, True), ("exit", 3, True),
                                              ("os_exit", 4, False)])
def test_crash_after_tuning_still_leaves_records(tmp_path, how, rc, persisted):
    """atexit survives an exception and sys.exit; os._exit (and fatal signals) skip
    it -- the documented limit."""
    rec = tmp_path / "autotune_records"
    env = dict(os.environ, ZL_OP="add_one", ZL_BACKEND="cuda", OUT_DIR=str(tmp_path),
               **{RECORD_DIR_ENV: str(rec)})
    env.pop(REPLAY_DIR_ENV, None)
    script = CRASH_SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests"))
    proc = subprocess.run([sys.executable, "-c", script, how], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == rc, proc.stderr
    assert (rec / "add_one.json").is_file() is persisted
    if persisted:
        doc = json.loads((rec / "add_one.json").read_text())
        assert doc[KERNEL]["100,torch.float32,torch.float32"]["kwargs"] == {"BLOCK": 32}


# ------------------------------------------------------ end to end (run_pytest.sh)

def _recs(result, op):
    return json.loads((result.out_dir / "autotune_records" / f"{op}.json").read_text())


def _ident(result):
    return json.loads((result.out_dir / "run_identity.json").read_text())


def test_run_pytest_record_then_replay_libtuner(zl_run):
    """LibTuner + LibEntry kernel through run_pytest.sh (plain @triton.autotune through
    the driver is covered by the sweep tests in test_parallel_warmup_plugin.py)."""
    op, op_file, kernel = "gelu_backward", "gelu", "flag_gems.ops.gelu.gelu_backward_kernel"
    a = zl_run(OP=op, OP_FILE=op_file, ZL_ENABLE_IR="0", ZL_ISOLATE_TUNER_CACHE="1",
               SHAPE_FILE="upstream")
    assert a.returncode == 0, a.explain()
    recs = _recs(a, op)
    assert kernel in recs and recs[kernel], recs.keys()
    assert _ident(a)["autotune_mode"] == "record"
    b = zl_run(OP=op, OP_FILE=op_file, ZL_ENABLE_IR="0", ZL_ISOLATE_TUNER_CACHE="1",
               SHAPE_FILE="upstream", REPLAY_FROM=str(a.out_dir))
    assert b.returncode == 0, b.explain()
    assert "AUTOTUNE_REPLAY_FALLBACK" not in b.output
    assert _ident(b)["autotune_mode"] == "replay"
    assert f"replaying {sum(len(v) for v in recs.values())} recorded config(s)" in b.output
    assert not (b.out_dir / "autotune_records" / f"{op}.json").exists()  # replay tunes nothing
    assert json.loads((b.out_dir / "autotune_records" / f"{op}.used.json").read_text()) == recs
    # the link a comparison checks, and the finished sessions, as the real run wrote them
    from zl.autotune.records import digest
    from zl.runlog.caliber import complaints

    ia, ib = _ident(a), _ident(b)
    assert ia["autotune_record_digest"] == digest(recs) == ib["replay_record_digest"]
    assert ib["replay_source_run_id"] == ia["run_id"] != ib["run_id"]
    assert ia["finished"] == ib["finished"] == {"status": "complete", "exitstatus": 0}
    assert complaints([("before", a.out_dir), ("after", b.out_dir)]) == []


def _tuned_rows(root: Path) -> int:
    import sqlite3
    n = 0
    for db in root.rglob("*.db") if root.exists() else ():
        with sqlite3.connect(str(db)) as conn:
            n += conn.execute("SELECT COUNT(*) FROM tuned_config").fetchone()[0]
    return n


def _libcache(result):
    found = re.search(r"ZL_TEST_LIBCACHE=(\S+) rows=(\d+)", result.output)
    assert found, result.explain()
    return Path(found.group(1)), int(found.group(2))


def test_isolated_tuner_cache_lands_in_the_private_dir(zl_run, tmp_path):
    """ZL_ISOLATE_TUNER_CACHE=1: the fake flag_gems sqlite store is created under the
    run's private dir (removed afterwards), never under $HOME/.flaggems."""
    shapes = tmp_path / "two.yaml"
    shapes.write_text("zl_sweep:\n  shapes:\n    - [64]\n    - [128]\n")
    iso = zl_run(OP="zl_sweep", OP_FILE="zl_autotune_sweep", ZL_ENABLE_IR="0",
                 SHAPE_FILE=str(shapes), ZL_ISOLATE_TUNER_CACHE="1")
    assert iso.returncode == 0, iso.explain()
    db, rows = _libcache(iso)
    assert db.is_relative_to(iso.out_dir / ".flaggems_cache") and rows > 0, (db, rows)
    assert "benchmark.test_zl_autotune_sweep.zl_lib_kernel" in _recs(iso, "zl_sweep")
    # run_pytest.sh's preflight `import flag_gems` may create an empty store in
    # $HOME; what matters is that no tuned config was written there.
    assert _tuned_rows(iso.out_dir.parent / "home" / ".flaggems") == 0
    assert "ZL_ISOLATE_TUNER_CACHE=1 but" not in iso.output  # configured before import

    shared = zl_run(OP="zl_sweep", OP_FILE="zl_autotune_sweep", ZL_ENABLE_IR="0",
                    SHAPE_FILE=str(shapes))
    assert shared.returncode == 0, shared.explain()
    db, rows = _libcache(shared)
    assert db.is_relative_to(shared.out_dir.parent / "home" / ".flaggems") and rows > 0
    assert _tuned_rows(shared.out_dir.parent / "home" / ".flaggems") > 0


def test_record_takes_pre_hook_from_the_tuners_config_list():
    # LibTuner returns sqlite-rebuilt configs without their hook and restores it from
    # its list at launch (mm's TMA descriptor hook on the H200): record what runs.
    import triton

    hooked = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3, pre_hook=lambda nargs: None)
    other = triton.Config({"BLOCK": 128}, num_warps=4, num_stages=3)
    bare = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3)
    assert record_dict(bare, [other, hooked])["pre_hook"] is True
    assert record_dict(bare, [other])["pre_hook"] is False
    assert record_dict(other, [hooked])["pre_hook"] is False
