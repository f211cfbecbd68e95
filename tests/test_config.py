"""zl.config: the run configuration built once from the variables, written as JSON, read
back by the plugins; the command line wins over it."""
import json
from dataclasses import fields, replace

import pytest

from zl import config as zc


class FakeConfig:
    """A pytest config stand-in: getoption answers the given options, a stash caches."""

    def __init__(self, **given):
        self.given = given
        self.stash = pytest.Stash()
        self.cleanups = []

    def getoption(self, dest, default=None):
        return self.given.get(dest, default)

    def add_cleanup(self, fn):
        self.cleanups.append(fn)


def test_every_setting_is_a_field_with_its_default():
    defaults = {f.name: f.default for f in fields(zc.RunConfig)}
    for s in zc.SETTINGS:
        assert defaults[s.attr] == s.default, s
    assert len({s.env for s in zc.SETTINGS}) == len({s.flag for s in zc.SETTINGS}) == len(zc.SETTINGS)


def test_from_environ_reads_each_setting_from_its_variable():
    env = {s.env: f"word-{i}" for i, s in enumerate(zc.SETTINGS)}
    cfg = zc.from_environ({**env, "ZL_CAMPAIGN_ID": "camp", "NO_COLOR": "1"})
    for i, s in enumerate(zc.SETTINGS):
        assert getattr(cfg, s.attr) == f"word-{i}"
        assert cfg.word(s.flag) == f"word-{i}"
    assert cfg.campaign_id == "camp" and cfg.no_color is True
    empty = zc.from_environ({})
    assert empty == zc.RunConfig() and empty.no_color is False
    # A set-but-empty variable is the user's word, not the default (ZL_ENABLE_CUDAGRAPH='' is auto
    # to its plugin, ZL_DEVICE='' is "the inherited list's first").
    assert zc.from_environ({"ZL_L2": ""}).l2 == ""


def test_word_of_an_unknown_flag_is_a_lookup_error():
    with pytest.raises(LookupError, match="--zl-nope is not a zl_bench setting"):
        zc.RunConfig().word("--zl-nope")


@pytest.mark.parametrize("env,attr,want", [
    ({}, "bench_level", "core"),
    ({"BENCH_LEVEL": "comprehensive"}, "bench_level", "comprehensive"),
    ({"USE_FLAGTUNE": " Yes "}, "use_flagtune", True),
    ({"USE_FLAGTUNE": "off"}, "use_flagtune", False),
    ({"ZL_ISOLATE_TUNER_CACHE": "1"}, "isolate", True),
    ({"FLAGGEMS_PERF_COLOR": "ALWAYS"}, "color", "always"),
    ({"ZL_DIRECT_REPEAT": "7"}, "direct_repeat", 7),
    ({}, "direct_repeat", 1),
    ({"ZL_SEED": "4294967295"}, "seed", 2 ** 32 - 1),
    ({"DTYPES": "float16,bfloat16 float32"}, "dtypes", ("float16", "bfloat16", "float32")),
    ({"REPLAY_FROM": "runs/a"}, "replay_from", "runs/a"),
])
def test_run_variables_parse(env, attr, want):
    assert getattr(zc.run_variables(env), attr) == want


@pytest.mark.parametrize("env,needle", [
    ({"BENCH_LEVEL": "full"}, "BENCH_LEVEL must be core or comprehensive (got: full)"),
    ({"USE_FLAGTUNE": "maybe"}, "USE_FLAGTUNE='maybe' is not an on/off value"),
    ({"ZL_ISOLATE_TUNER_CACHE": "2"}, "ZL_ISOLATE_TUNER_CACHE='2' is not an on/off value"),
    ({"FLAGGEMS_PERF_COLOR": "auto"}, "FLAGGEMS_PERF_COLOR must be always, never or empty (got: auto)"),
    ({"ZL_DIRECT_REPEAT": "0"}, "ZL_DIRECT_REPEAT='0' must be an integer in 1..1000"),
    ({"ZL_DIRECT_REPEAT": "9" * 20}, "ZL_DIRECT_REPEAT="),
    ({"ZL_SEED": "-1"}, "ZL_SEED='-1' must be an integer in 0..4294967295"),
    ({"DTYPES": "*"}, "'*' is not a dtype name"),
])
def test_a_bad_variable_is_a_named_config_error(env, needle):
    with pytest.raises(zc.ConfigError) as err:
        zc.run_variables(env)
    assert needle in str(err.value)


@pytest.mark.parametrize("name,ok", [("softmax", True), ("nextafter_@x.1-2", True), ("../x", False),
                                     ("a/b", False), ("*", False), ("", False), ("a..b", False)])
def test_operator_names(name, ok):
    if ok:
        assert zc.check_name("OP", name) == name
    else:
        with pytest.raises(zc.ConfigError, match="is not an operator name"):
            zc.check_name("OP", name)


def test_json_round_trip_is_exact_and_written_atomically(tmp_path):
    cfg = replace(zc.from_environ({"ZL_L2": "cold", "ZL_OP": "mm"}), dtypes=("float16",),
                  use_flagtune=True, test_file="/fg/benchmark/test_mm.py::test_mm")
    path = zc.write(cfg, str(tmp_path))
    assert path == tmp_path / zc.CONFIG_NAME
    assert [p.name for p in tmp_path.iterdir()] == [zc.CONFIG_NAME]   # no temp file left
    back = zc.load(str(path))
    assert back == cfg and isinstance(back.dtypes, tuple)
    assert json.loads(path.read_text())["schema_version"] == zc.SCHEMA_VERSION


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: "not json", "is not valid JSON"),
    (lambda d: [1], "is not a zl_bench run configuration"),
    (lambda d: {**d, "schema_version": 99}, "is not a zl_bench run configuration"),
    (lambda d: {**d, "extra": 1}, "unknown field(s) ['extra']"),
    (lambda d: {k: v for k, v in d.items() if k != "l2"}, "missing field(s) ['l2']"),
    (lambda d: {**d, "use_flagtune": "1"}, "field 'use_flagtune' must be bool"),
    (lambda d: {**d, "seed": 0}, "field 'seed' must be str"),
    (lambda d: {**d, "dtypes": "float16"}, "field 'dtypes' must be tuple"),
])
def test_a_bad_config_file_is_named(tmp_path, mutate, needle):
    data = json.loads(zc.RunConfig().to_json())
    out = mutate(data)
    path = tmp_path / "c.json"
    path.write_text(out if isinstance(out, str) else json.dumps(out))
    with pytest.raises(zc.ConfigError) as err:
        zc.load(str(path))
    assert needle in str(err.value) and str(path) in str(err.value)
    with pytest.raises(zc.ConfigError, match="cannot read it"):
        zc.load(str(tmp_path / "absent.json"))


def test_the_file_is_read_when_given_and_the_command_line_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("ZL_L2", "from-env")
    monkeypatch.setenv("ZL_SEED", "11")
    path = zc.write(replace(zc.RunConfig(), l2="cold", seed="5", op="mm"), str(tmp_path))
    config = FakeConfig(zl_config=str(path), zl_seed="9")
    cfg = zc.of(config)
    assert (cfg.l2, cfg.seed, cfg.op) == ("cold", "9", "mm")   # file, command line, file
    assert zc.current().l2 == "cold"
    for fn in config.cleanups:
        fn()


def test_without_a_file_the_environment_is_the_configuration(monkeypatch):
    monkeypatch.setenv("ZL_L2", "cold")
    monkeypatch.delenv("ZL_SEED", raising=False)
    config = FakeConfig(zl_seed="3")
    assert (zc.of(config).l2, zc.of(config).seed) == ("cold", "3")
    # Cached per session: the environment is read once, when the session first asks.
    monkeypatch.setenv("ZL_L2", "warm")
    assert zc.of(config).l2 == "cold"
    assert zc.current().l2 == "cold"       # the session's, while it is active
    for fn in config.cleanups:
        fn()
    assert zc.current().l2 == "warm"       # after it, the environment again


def test_early_of_reads_the_command_line_pytest_has_parsed_so_far(tmp_path, monkeypatch):
    import types
    monkeypatch.setenv("ZL_ENABLE_RESULTS", "1")
    early = FakeConfig()
    early.known_args_namespace = types.SimpleNamespace(zl_results="0")
    assert zc.early_of(early).enable_results == "0"
    for fn in early.cleanups:
        fn()


def test_only_the_configuration_and_the_child_environment_touch_os_environ():
    """`grep -rn os.environ zl/ _*_plugin.py` names zl/config.py (the user's variables) and
    zl/childenv.py (the environment of this process's libraries and of child processes),
    nothing else: no plugin reads a setting or hands a fact over through it."""
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    files = sorted(repo.glob("_*_plugin.py")) + sorted((repo / "zl").rglob("*.py"))
    readers = {str(p.relative_to(repo)) for p in files
               if "os.environ" in p.read_text(encoding="utf-8") or "getenv" in p.read_text(encoding="utf-8")}
    assert readers == {"zl/config.py", "zl/childenv.py"}


def test_prepare_resolves_its_facts_into_the_run_configuration(tmp_path):
    """zl.prepare's Run keeps no field list of its own for what it resolves: op, node, shapes,
    replay run and directories live in its RunConfig (`backend` there is the object whose
    name the configuration holds), which build_config completes."""
    from pathlib import Path
    from zl import prepare
    assert {f.name for f in fields(prepare.Run)} & {f.name for f in fields(zc.RunConfig)} == {"backend"}
    fake = Path(__file__).resolve().parent / "fake_flaggems"
    run = prepare.read_run({"OP": "relu", "OP_FILE": "relu", "FLAGGEMS_DIR": str(fake),
                            "DTYPES": "float16,bfloat16", "ZL_SEED": "7", "REPLAY_FROM": str(tmp_path),
                            "OUT_DIR": "relative/out", "ZL_L2": "cold"})
    cfg = run.cfg
    assert (cfg.op, cfg.op_file, cfg.flaggems_dir, cfg.test_file, cfg.shape_mode) == (
        "relu", "relu", str(fake), f"{fake}/benchmark/test_relu.py::test_relu", "inline")
    assert (cfg.dtypes, cfg.seed, cfg.replay_from, cfg.backend, cfg.l2) == (
        ("float16", "bfloat16"), "7", str(tmp_path), run.backend.name, "cold")
    with pytest.raises(RuntimeError, match="before claim"):
        run.out   # OUT_DIR is resolved by claim / prepare_run, never read raw
    run.resolve(out_dir=str(tmp_path))
    done = prepare.build_config(run, "", f"{tmp_path}/autotune_records", "", "isolated", "")
    assert (done.ttgir_dump_dir, done.tuner_cache, done.op) == (f"{tmp_path}/ttgir", "isolated", "relu")
