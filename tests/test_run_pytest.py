"""run_pytest.sh end to end on the CPU harness: run directory, identity, variables,
preflight, exit codes. Each full run costs a subprocess with a fresh torch/triton
import, so one run asserts many things."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness.runner import FAKE_FLAGGEMS_DIR, procs_with_env
from zl.ir import RULES as IR_RULES

CALIBER_KEYS = ("schema_version", "provider", "op", "op_file", "test_file", "flaggems_dir", "backend",
                "device", "device_name", "device_arch", "flaggems_vendor", "bench_level", "shape_mode",
                "tuner_cache", "autotune_mode", "timer", "direct_repeat", "triton_version",
                "torch_version", "flag_gems_version", "flaggems_commit")

TITLE_RE = re.compile(r"^Operator: (\S+)  Performance Test \(dtype=(\S+), mode=(\w+),level=(\w+)\)$", re.M)


def _identity(run_dir: Path) -> dict:
    return json.loads((run_dir / "run_identity.json").read_text())


def test_default_run_leaves_a_complete_run_directory(zl_run, tmp_path):
    runs_root = tmp_path / "runs"
    runs_root.mkdir()
    # Two runs started in the same second must not share a directory: occupy the
    # names of the next few seconds so this run has to step to "-2".
    now = time.time()
    for dt in range(0, 8):
        (runs_root / f"relu_{time.strftime('%Y%m%d-%H%M%S', time.localtime(now + dt))}").mkdir()
    tmp_dir = tmp_path / "tmpdir"
    tmp_dir.mkdir()
    # relu, not the default softmax: the built-in inline yaml holds GPU-sized softmax
    # shapes, far too slow for the interpreter. relu has no key there, so inline mode
    # falls back to the class chain / DEFAULT_SHAPES exactly like upstream.
    r = zl_run(OUT_DIR=None, OP="relu", OP_FILE="relu", ZL_RUNS_ROOT=runs_root, TMPDIR=tmp_dir,
               FLAGGEMS_PERF_COLOR="always", NO_COLOR=None)
    assert r.returncode == 0, r.explain()
    made = [p for p in runs_root.iterdir() if (p / "run.log").exists()]
    assert len(made) == 1 and made[0].name.endswith("-2"), sorted(p.name for p in runs_root.iterdir())
    run = made[0]
    for name in ("run.log", "shapes.yaml", "shapes.source.yaml", "run_identity.json"):
        assert (run / name).is_file(), name
    for name in ("autotune_records", "ttgir"):
        assert (run / name).is_dir(), name
    log = (run / "run.log").read_text()
    # The console was coloured (FLAGGEMS_PERF_COLOR=always) but run.log is plain text.
    assert "\x1b[" in r.stdout and "\x1b[" not in log
    titles = TITLE_RE.findall(log)
    assert [(t[0], t[1], t[2], t[3]) for t in titles] == [
        ("relu", "torch.float16", "kernel", "core"), ("relu", "torch.float32", "kernel", "core")]
    assert "1 passed" in log and ">>> done." in log
    # GEMS_VENDOR was set by the device-setup plugin before flag_gems was imported.
    assert "[fake-flag_gems] import GEMS_VENDOR=nvidia" in log
    ident = _identity(run)
    missing = [k for k in CALIBER_KEYS if k not in ident]
    assert not missing, missing
    assert ident["schema_version"] == 1 and ident["provider"] == "flaggems"
    assert (ident["op"], ident["op_file"], ident["backend"]) == ("relu", "relu", "cuda")
    assert ident["test_file"] == f"{FAKE_FLAGGEMS_DIR}/benchmark/test_relu.py::test_relu"
    assert ident["bench_level"] == "core" and ident["shape_mode"] == "inline"
    assert re.fullmatch(r"shared\(/.*/home/\.flaggems\)", ident["tuner_cache"]), ident["tuner_cache"]
    assert ident["autotune_mode"] == "record" and ident["flaggems_vendor"] == "nvidia"
    assert ident["timer"] == "cuda_graph" and ident["direct_repeat"] == 1
    assert ident["triton_version"] and ident["torch_version"] and ident["flag_gems_version"]
    assert ident["ir_collection"] == IR_RULES
    # The fake tree sits inside zl_bench's own repository: that commit is not FlagGems'.
    assert ident["flaggems_commit"] == ""
    assert not (run / "run_identity.json.lock").exists()
    # Inline entries are laid over upstream's core_shapes.yaml, so relu (not in the
    # inline yaml) keeps upstream's entry instead of falling to DEFAULT_SHAPES.
    source = (run / "shapes.source.yaml").read_text()
    assert "softmax:" in source and "relu:" in source and "[1024, 1024]" in source
    shapes = (run / "shapes.yaml").read_text()
    assert "source: yaml" in shapes and "[64, 128]" in shapes
    # Private Triton cache removed afterwards.
    assert not list(tmp_dir.glob("zl_triton_cache.*"))
    # The run configuration the plugins read: the resolved facts the identity stub states.
    from zl.config import load
    cfg = load(str(run / "run_config.json"))
    assert (cfg.op, cfg.op_file, cfg.test_file, cfg.out_dir) == ("relu", "relu", ident["test_file"], str(run))
    assert (cfg.backend, cfg.bench_level, cfg.shape_mode, cfg.tuner_cache) == \
        ("cuda", "core", "inline", ident["tuner_cache"])
    assert cfg.record_dir == f"{run}/autotune_records" and cfg.replay_dir == "" and cfg.color == "always"
    assert cfg.triton_cache_dir.startswith(str(tmp_dir / "zl_triton_cache."))


def test_test_node_dtypes_and_upstream_shapes(zl_run):
    node = f"{FAKE_FLAGGEMS_DIR}/benchmark/test_softmax.py::test_softmax"
    r = zl_run(TEST_NODE=node, OP="ignored", OP_FILE="ignored", FLAGGEMS_DIR="/nonexistent", DTYPES="float32")
    assert r.returncode == 0, r.explain()
    titles = TITLE_RE.findall(r.log_text)
    assert [t[1] for t in titles] == ["torch.float32"]
    ident = _identity(r.out_dir)
    assert ident["shape_mode"] == "upstream" and ident["op"] == "softmax"
    assert ident["flaggems_dir"] == str(FAKE_FLAGGEMS_DIR)
    assert "--shape_file" not in r.log_text.split(">>> plugins")[0]
    # Upstream mode: no override, the effective shapes still recorded.
    assert "source: upstream" in (r.out_dir / "shapes.yaml").read_text()


def test_shape_file_dtype_restriction_and_exit_status_is_pytests(zl_run, tmp_path):
    shapes = tmp_path / "s.yaml"
    shapes.write_text("amax:\n  shapes:\n    - [4, 64]\n    - [8, 2048]\n")
    r = zl_run(OP="amax", OP_FILE="amax", SHAPE_FILE=shapes)
    # The fake amax raises on [8, 2048]; upstream fails the test before printing.
    assert r.returncode == 1, r.explain()
    assert "1 failed" in r.log_text
    ident = _identity(r.out_dir)
    assert ident["shape_mode"] == "file"
    assert (r.out_dir / "shapes.source.yaml").read_text() == shapes.read_text()


def test_isolated_tuner_cache_is_private_and_removed(zl_run, tmp_path):
    # also: a rerun into a directory holding an earlier run (here a replay side, killed with
    # its private tuner cache still there) moves that run's files aside; nothing stale
    # (replay_from, shapes.source.yaml, *.used.json) describes the new run. The directory's
    # name starts with '-': it is a path, not an option.
    work = tmp_path / "w"
    out = work / "-rerun"
    (out / "autotune_records").mkdir(parents=True)
    (out / "autotune_records" / "gelu_backward.used.json").write_text("{}")
    (out / ".flaggems_cache").mkdir()
    (out / "shapes.source.yaml").write_text("old: {}\n")
    (out / "run.log").write_text("old log\n")
    (out / "run_identity.json").write_text(json.dumps({"replay_from": "/old/run", "autotune_mode": "replay"}))
    from tests.harness.runner import run_zl

    r = run_zl(work, OP="gelu_backward", OP_FILE="gelu", ZL_ISOLATE_TUNER_CACHE=" on ", DTYPES="float32",
               OUT_DIR="-rerun")
    assert r.returncode == 0, r.explain()
    ident = _identity(out)
    assert ident["tuner_cache"] == "isolated"
    assert "replay_from" not in ident and ident["autotune_mode"] == "record"
    assert not list(tmp_path.glob("**/home/.flaggems"))
    assert not (out / ".flaggems_cache").exists()
    prev = [p for p in out.iterdir() if p.name.startswith("prev-")]
    assert len(prev) == 1, sorted(p.name for p in out.iterdir())
    assert (prev[0] / "run.log").read_text() == "old log\n"
    assert json.loads((prev[0] / "run_identity.json").read_text())["replay_from"] == "/old/run"
    assert (prev[0] / "autotune_records" / "gelu_backward.used.json").is_file()
    assert not (out / "autotune_records" / "gelu_backward.used.json").exists()
    assert (out / "shapes.source.yaml").read_text() != "old: {}\n"
    assert "moved to prev-" in (out / "run.log").read_text()


def test_foreign_vendor_module_reported(zl_run):
    # also: with the autotune plugin off the caliber says so instead of "record"
    # (' 0': every reader parses it through zl.switches; the shell once read it as on)
    r = zl_run(OP="exp", OP_FILE="exp", DTYPES="float32", ZL_ENABLE_AUTOTUNE=" 0")
    assert r.returncode == 0, r.explain()
    assert "FOREIGN_VENDOR_MODULE active=nvidia loaded=mthreads" in r.log_text
    assert _identity(r.out_dir)["autotune_mode"] == "off"
    assert "_autotune_record_plugin" not in r.log_text.split(">>> plugins:")[1].splitlines()[0]


@pytest.mark.parametrize("env,check,detail", [
    ({"FLAGGEMS_DIR": "/nonexistent/fg", "ZL_FLAGGEMS_FALLBACK_ROOTS": ""}, "flaggems_dir",
     "detail='FlagGems directory not found: /nonexistent/fg'"),
    ({"OP": "nope", "OP_FILE": "nope"}, "benchmark_file", "detail='benchmark file not found: "),
    ({"SHAPE_FILE": "/nonexistent/shapes.yaml"}, "shape_file",
     "detail='shape file not found: /nonexistent/shapes.yaml'"),
    ({"SHAPE_FILE": "/dev/zero"}, "shape_file",
     "detail='shape file is not a regular file (a directory, device or fifo): /dev/zero'"),
    ({"REPLAY_FROM": "/nonexistent/run"}, "replay_from",
     "detail='replay run directory not found: /nonexistent/run'"),
    ({"PYTHONPATH": "__REPO_ONLY__"}, "interpreter", "cannot find flag_gems"),
])
def test_preflight_failures_exit_3_with_named_check(zl_run, env, check, detail):
    from tests.harness.runner import REPO_ROOT

    env = {k: (str(REPO_ROOT) if v == "__REPO_ONLY__" else v) for k, v in env.items()}
    r = zl_run(**env)
    assert r.returncode == 3, r.explain()
    assert f"!!! PREFLIGHT_FAILED check={check}" in r.stderr
    assert detail in r.stderr  # worded as the failure, never "... exists: <path>"
    if check == "interpreter":
        assert "python" in r.stderr  # names the interpreter it tried
    assert r.log_text == ""  # refused before a run directory is filled


@pytest.mark.parametrize("env,needle", [
    ({"BENCH_LEVEL": "full"}, "BENCH_LEVEL must be core or comprehensive"),
    ({"ZL_BACKEND": "tpu"}, "unknown backend"),
    ({"TEST_NODE": "benchmark/test_softmax.py"}, "TEST_NODE must look like"),
    ({"USE_FLAGTUNE": "maybe"}, "USE_FLAGTUNE='maybe' is not an on/off value"),
    ({"ZL_EXTRA_PLUGINS": "_no_such_plugin"}, "_no_such_plugin"),
    ({"ZL_ENABLE_AUTOTUNE": "0", "REPLAY_FROM": "/tmp"}, "REPLAY_FROM needs the autotune plugin"),
    ({"ZL_ENABLE_AUTOTUNE": " 0", "REPLAY_FROM": "/tmp"}, "REPLAY_FROM needs the autotune plugin"),
    ({"ZL_ENABLE_AUTOTUNE": "maybe"}, "ZL_ENABLE_AUTOTUNE='maybe' is not an on/off value"),
    ({"ZL_ISOLATE_TUNER_CACHE": "2"}, "ZL_ISOLATE_TUNER_CACHE='2' is not an on/off value"),
    ({"OP": "../../x", "OP_FILE": "relu"}, "OP='../../x' is not an operator name"),
    ({"OP": "relu", "OP_FILE": "*"}, "OP_FILE='*' is not an operator name"),
    ({"DTYPES": "*"}, "'*' is not a dtype name"),
    ({"ZL_DIRECT_REPEAT": "0"}, "ZL_DIRECT_REPEAT='0' must be an integer in 1..1000"),
    ({"ZL_DIRECT_REPEAT": "1001"}, "ZL_DIRECT_REPEAT='1001' must be an integer in 1..1000"),
    ({"ZL_DIRECT_REPEAT": "9" * 20}, "ZL_DIRECT_REPEAT"),
    ({"ZL_SEED": str(2 ** 66)}, "ZL_SEED="),
    ({"ZL_SEED": "-1"}, "ZL_SEED='-1' must be an integer in 0..4294967295"),
    ({"OUT_DIR": "__FILES__"}, "is not empty and holds no earlier run"),
])
def test_bad_values_exit_2(zl_run, tmp_path, env, needle):
    if env.get("OUT_DIR") == "__FILES__":   # a data directory is refused, never emptied aside
        data = tmp_path / "data"
        data.mkdir()
        (data / "notes.txt").write_text("mine\n")
        env = {**env, "OUT_DIR": data}
    r = zl_run(**env)
    assert r.returncode == 2, r.explain()
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    if env.get("OUT_DIR"):
        assert sorted(p.name for p in Path(env["OUT_DIR"]).iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("text,needle", [
    ("", "holds no operator entries"),
    ("softmax:\n  shapes:\n    - [4, 64]\n", "has no 'relu:' entry"),
    ("relu:\n  shapes:\n    - [0, 64]\n", "is not a list of positive integers"),
    ("relu:\n  shapes:\n    - [4, -1]\n", "is not a list of positive integers"),
    ("relu:\n  shapes:\n    - [valid, true]\n", "is not a list of positive integers"),
    ("relu: [unclosed\n", "is not valid yaml"),
    ("relu:\n  shape_desc: M\n", "has no 'shapes:' list"),
])
def test_shape_file_is_validated_at_preflight(zl_run, tmp_path, text, needle):
    shapes = tmp_path / "s.yaml"
    shapes.write_text(text)
    r = zl_run(OP="relu", OP_FILE="relu", SHAPE_FILE=shapes)
    assert r.returncode == 3, r.explain()
    line = [x for x in r.stderr.splitlines() if "PREFLIGHT_FAILED" in x]
    assert len(line) == 1 and "check=shape_file" in line[0] and needle in line[0], r.stderr
    assert r.log_text == ""


def _alias_bomb():
    lines = ["a0: &a0 [4, 64]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\nrelu:\n  shapes: [*a9]\n"


@pytest.mark.parametrize("text,needle", [
    pytest.param("relu: &a\n  shapes: [*a]\n", "refers to a node that contains it (a recursive structure)",
                 id="recursive_alias"),
    pytest.param(b"relu:\n  shapes:\n    - [4, 64]  # \xff\n", "is not UTF-8 text (byte 0xff", id="not_utf8"),
    pytest.param(_alias_bomb(), "yaml nodes with aliases expanded", id="alias_bomb"),
    pytest.param("relu:\n  shapes:\n" + "    - [4, 64]\n" * 100_000, "bytes (the shape file limit)",
                 id="oversized"),
    pytest.param("relu:\n  shapes:\n    - [1000000000, 1000000000]\n",
                 "needs a tensor of at least 1000000000000000000 elements x 2 B (float16)", id="cannot_fit"),
    pytest.param(f"relu:\n  shapes:\n    - [{2 ** 63 + 5}, 4]\n", "which does not fit int64", id="over_int64"),
    pytest.param("relu:\n  shapes:\n    - [1O24, 4]\n", "'1O24', a word that reads like a mistyped number",
                 id="letter_O_typo"),
])
def test_shape_file_attacks_fail_preflight_by_name(zl_run, tmp_path, text, needle):
    """Each of these once raised a traceback, hung preflight, or failed inside pytest."""
    shapes = tmp_path / "s.yaml"
    shapes.write_bytes(text if isinstance(text, bytes) else text.encode())
    t0 = time.monotonic()
    r = zl_run(OP="relu", OP_FILE="relu", SHAPE_FILE=shapes, DTYPES="float16")
    assert r.returncode == 3, r.explain()
    assert time.monotonic() - t0 < 60
    line = [x for x in r.stderr.splitlines() if "PREFLIGHT_FAILED" in x]
    assert len(line) == 1 and "check=shape_file" in line[0] and needle in line[0], r.stderr
    assert "Traceback" not in r.stderr and r.log_text == ""


def test_shape_file_must_fit_the_devices_memory(zl_run, tmp_path):
    """With a GPU visible its total memory bounds the shapes: a fake nvidia-smi says 1 GiB,
    so a 32768 x 32768 float16 tensor (2 GiB) is refused before pytest starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$*\" in *memory.total*) echo 1024 ;; *) exit 1 ;; esac\n")
    smi.chmod(0o755)
    shapes = tmp_path / "s.yaml"
    shapes.write_text("relu:\n  shapes:\n    - [64, 128]\n    - [32768, 32768]\n")
    r = zl_run(OP="relu", OP_FILE="relu", SHAPE_FILE=shapes, DTYPES="float16 float32", ZL_DEVICE="0",
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 3, r.explain()
    assert ("'relu' shape [32768, 32768] needs a tensor of at least 1073741824 elements x 2 B (float16) "
            "= 2 GiB, more than device 0's memory (1 GiB)") in r.stderr, r.stderr


@pytest.mark.parametrize("shape,ok", [
    ([1, 2, 5, 5, 3, 3, 3, 1, "valid", 1], True),   # conv2d_padding's class-list tuple
    ([2, 4, 24, 24, 12, 12, True], True),            # align_corners as a flag
    ([[4, 64], [64]], True),
    ([0, 64], False), ([4, -1], False), (["valid"], False), ([], False), ([4, 1.5], False),
])
def test_shape_entries_allow_words_and_flags_but_no_nonpositive_dimension(shape, ok):
    from zl.shapefile import _positive_dims
    assert _positive_dims(shape) is ok


def test_help_prints_usage_and_takes_no_arguments(zl_run, tmp_path):
    for flag in ("--help", "-h"):
        r = zl_run(args=(flag,), OUT_DIR=tmp_path / "never")
        assert r.returncode == 0 and "Every knob is an environment variable" in r.stdout
    r = zl_run(args=("--level",), OUT_DIR=tmp_path / "never")
    assert r.returncode == 2 and "takes no arguments" in r.stderr
    assert not (tmp_path / "never").exists()


def test_reclaim_removes_only_temporaries_of_dead_owners(tmp_path):
    from zl.rundir import reclaim_tmp

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"zl_triton_cache.{dead.pid}.abc"
    stale.mkdir()
    (tmp_path / f"zl_inline_shapes.{dead.pid}.x.yaml").write_text("a: 1\n")
    # a killed batch's shared bytecode cache (zl.childenv), named for its driver's pid
    from zl.childenv import PYCACHE_TMP
    (tmp_path / f"{PYCACHE_TMP}{dead.pid}.q1").mkdir()
    live = tmp_path / f"zl_triton_cache.{os.getpid()}.abc"
    live.mkdir()
    (tmp_path / f"{PYCACHE_TMP}{os.getpid()}.q2").mkdir()
    other = tmp_path / "zl_triton_cache.notapid"
    other.mkdir()
    removed = reclaim_tmp(str(tmp_path))
    assert len(removed) == 3 and not stale.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, other.name, f"{PYCACHE_TMP}{os.getpid()}.q2"])


_SLEEP_PLUGIN = """
import os, time
def pytest_configure(config):
    with open(os.environ["ZL_TEST_PIDFILE"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_run_pytest_leaves_nothing_running(tmp_path, sig):
    from tests.harness.runner import REPO_ROOT, base_env

    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "_zl_sleep_plugin.py").write_text(_SLEEP_PLUGIN)
    tmpdir, out, pidfile = tmp_path / "tmp", tmp_path / "run", tmp_path / "pid"
    tmpdir.mkdir()
    (tmp_path / "home").mkdir()
    env = base_env(tmp_path / "home", OUT_DIR=out, OP="relu", OP_FILE="relu", TMPDIR=tmpdir,
                   ZL_EXTRA_PLUGINS="_zl_sleep_plugin", ZL_TEST_PIDFILE=pidfile,
                   PYTHONPATH=f"{REPO_ROOT}:{FAKE_FLAGGEMS_DIR / 'src'}:{tmp_path / 'plug'}")
    proc = subprocess.Popen(["bash", str(REPO_ROOT / "run_pytest.sh")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (pidfile.is_file() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pidfile.is_file() and pidfile.read_text(), "pytest never reached its plugins"
    pytest_pid = int(pidfile.read_text())
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (143 if sig == signal.SIGTERM else -9)

    def pytest_gone():   # exited; a zombie waiting for a slow reaper counts as gone
        try:
            return Path(f"/proc/{pytest_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return True
    # pytest, its supervisor and the tee are gone within seconds, even after SIGKILL (60 s: a
    # loaded machine)
    deadline = time.monotonic() + 60
    while (procs_with_env(str(out)) or not pytest_gone()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_with_env(str(out)) == [] and pytest_gone()
    if sig == signal.SIGTERM:
        assert not list(tmpdir.iterdir())   # temporaries removed by the trap
        assert "SIGTERM received" in (out / "run.log").read_text()
    else:
        # a trap cannot run on SIGKILL: the next run reclaims what the dead one left
        assert list(tmpdir.glob("zl_triton_cache.*")) and list(tmpdir.glob("zl_inline_shapes.*"))
        from zl.rundir import reclaim_tmp
        assert len(reclaim_tmp(str(tmpdir))) == 2 and not list(tmpdir.iterdir())


def test_batch_attempt_logs_stay_and_do_not_block_a_rerun(tmp_path):
    """run_batch.py wipes a case directory between attempts but keeps run.attempt<N>.log in it;
    the next attempt's run_pytest.sh must neither refuse that directory nor move the logs."""
    from zl.rundir import move_previous_run
    case = tmp_path / "case"
    case.mkdir()
    (case / "run.attempt1.log").write_text("attempt 1\n")
    assert move_previous_run(case) is None
    assert (case / "run.attempt1.log").read_text() == "attempt 1\n"
    (case / "run.log").write_text("a run\n")
    aside = move_previous_run(case)
    assert aside is not None and (aside / "run.log").is_file()
    assert (case / "run.attempt1.log").is_file()


# ---------------------------------------------------------------- one run per OUT_DIR; unwritable places

_WAIT_PLUGIN = """
import os, time
def pytest_configure(config):
    for i in range(int(os.environ.get("ZL_TEST_CHATTY_LINES", "0"))):
        print(f"chatty line {i:05d} " + "x" * 64, flush=True)
    with open(os.environ["ZL_TEST_READY"], "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["ZL_TEST_GO"]) and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def _plugin_env(tmp_path: Path, **env) -> dict:
    """Variables for a run that stops inside pytest until the test creates `go`: `ready`
    appears once pytest is configuring (the run's directory is prepared, locked, logging)."""
    from tests.harness.runner import REPO_ROOT

    plug = tmp_path / "plug"
    plug.mkdir(exist_ok=True)
    (plug / "_zl_wait_plugin.py").write_text(_WAIT_PLUGIN)
    return dict(OP="relu", OP_FILE="relu", ZL_EXTRA_PLUGINS="_zl_wait_plugin",
                ZL_TEST_READY=tmp_path / "ready", ZL_TEST_GO=tmp_path / "go",
                PYTHONPATH=f"{REPO_ROOT}:{FAKE_FLAGGEMS_DIR / 'src'}:{plug}", **env)


def _start_run(tmp_path: Path, **env) -> subprocess.Popen:
    from tests.harness.runner import REPO_ROOT, base_env

    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.Popen(["bash", str(REPO_ROOT / "run_pytest.sh")], cwd=tmp_path,
                            env=base_env(tmp_path / "home", **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_ready(ready: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while not (ready.is_file() and ready.read_text()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.is_file(), proc.communicate(timeout=60)[0] if proc.poll() is not None else "never ready"


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def test_a_second_run_on_a_busy_out_dir_exits_2_naming_the_holder(tmp_path):
    """Two runs on one OUT_DIR both exited 0 and left it mixed. The second is refused before
    it touches anything; the first finishes as if alone."""
    from tests.harness.runner import run_zl

    out = tmp_path / "shared"
    first = _start_run(tmp_path, OUT_DIR=out, **_plugin_env(tmp_path))
    _wait_ready(tmp_path / "ready", first)
    before = _tree(out)
    second = run_zl(tmp_path / "second", OUT_DIR=out, OP="relu", OP_FILE="relu")
    assert second.returncode == 2, second.explain()
    assert "!!! OUT_DIR_BUSY" in second.stderr and f"locked by pid {first.pid}" in second.stderr
    assert _tree(out) == before            # nothing moved aside, nothing of the second run written
    (tmp_path / "go").write_text("")
    log = first.communicate(timeout=240)[0]
    assert first.returncode == 0, log
    text = (out / "run.log").read_text()
    assert text.count(">>> op=relu") == 1 and "1 passed" in text
    assert not [p for p in out.iterdir() if p.name.startswith("prev-")]


def test_the_out_dir_lock_dies_with_a_killed_run(tmp_path):
    """kill -9 of run_pytest.sh: once its children are gone (they die with it), the lock is
    free; no stale lock to clean up by hand."""
    from zl.locks import LockHeld, acquire

    out = tmp_path / "run"
    proc = _start_run(tmp_path, OUT_DIR=out, **_plugin_env(tmp_path))
    _wait_ready(tmp_path / "ready", proc)
    with pytest.raises(LockHeld) as held:
        acquire(out / ".zl.lock")
    assert held.value.pid == proc.pid
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while procs_with_env(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_with_env(str(out)) == []
    acquire(out / ".zl.lock").release()


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_an_unusable_tmpdir_exits_2_before_out_dir_exists(zl_run, tmp_path, kind):
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    if kind == "a file":
        tmp.write_text("")
    r = zl_run(OP="relu", OP_FILE="relu", OUT_DIR=out, TMPDIR=tmp)
    assert r.returncode == 2, r.explain()
    assert f"!!! TMPDIR='{tmp}' is not a directory" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_an_unwritable_tmpdir_is_named(tmp_path, monkeypatch):
    """Permissions do not stop root, so the refusal is driven through mkdtemp."""
    import tempfile
    from zl.prepare import BadValue, check_tmpdir

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    with pytest.raises(BadValue, match=r"TMPDIR='.*' is not writable \(Permission denied\)"):
        check_tmpdir({"TMPDIR": str(tmp_path)})


def _run_fsize_limited(tmp_path: Path, kib: int, **env) -> subprocess.CompletedProcess:
    """A full disk without root, a tmpfs or FUSE: RLIMIT_FSIZE (`ulimit -f`) makes every write
    past `kib` KiB fail. Python ignores SIGXFSZ, so its writes fail with EFBIG, an OSError on
    the same path as ENOSPC; `kib` is chosen so the first write to fail is the one under test."""
    from tests.harness.runner import REPO_ROOT, base_env

    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(["bash", "-c", f'ulimit -f {kib} && exec bash "$0"', str(REPO_ROOT / "run_pytest.sh")],
                          cwd=tmp_path, env=base_env(tmp_path / "home", **env),
                          capture_output=True, text=True, timeout=200)


def test_an_out_dir_that_takes_no_write_exits_6_and_leaves_no_run(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    fresh = tmp_path / "fresh"
    r = _run_fsize_limited(tmp_path, 0, OP="relu", OP_FILE="relu", OUT_DIR=fresh, TMPDIR=tmp)
    assert r.returncode == 6, r.stdout + r.stderr
    assert f"!!! OUT_DIR_WRITE_FAILED out={fresh} detail='EFBIG" in r.stderr and "Traceback" not in r.stderr
    assert not fresh.exists() and list(tmp.iterdir()) == []
    # an earlier run stays exactly where it was: the probe comes before anything is moved
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "run.log").write_text("the earlier run\n")
    (earlier / "run_identity.json").write_text('{"op": "relu"}')
    before = _tree(earlier)
    r = _run_fsize_limited(tmp_path, 0, OP="relu", OP_FILE="relu", OUT_DIR=earlier, TMPDIR=tmp)
    assert r.returncode == 6 and "OUT_DIR_WRITE_FAILED" in r.stderr, r.stdout + r.stderr
    assert {k: v for k, v in _tree(earlier).items() if k != ".zl.lock"} == before


def test_run_log_that_cannot_be_written_stops_the_run_with_exit_6(tmp_path):
    """Before: the tee died at its first failed write, run.log stayed empty and the run's next
    echo was killed by SIGPIPE (exit 141). Now the run stops at once (the plugin would wait
    300 s), exits 6, and the directory says it does not hold the run."""
    out = tmp_path / "run"
    env = _plugin_env(tmp_path, OUT_DIR=out, ZL_TEST_CHATTY_LINES="800")
    r = _run_fsize_limited(tmp_path, 16, **env)
    assert r.returncode == 6, r.stdout[-3000:] + r.stderr
    assert f"!!! OUT_DIR_WRITE_FAILED file={out}/run.log detail=File too large" in r.stdout
    assert "could not be written" in r.stderr and "exit 6" in r.stderr
    assert not (out / "run.log").exists() and (out / "run.log.write-failed").is_file()
    assert _identity(out)["out_dir_write_failed"] == "run.log"
    assert procs_with_env(str(out)) == []


def test_tee_names_a_log_it_cannot_write_and_keeps_the_console(tmp_path):
    import io

    from zl.term import tee_stripped

    got = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        sink = io.BytesIO()
        rc = tee_stripped("/dev/full", io.BytesIO(b"\x1b[1mone\x1b[0m\ntwo\n"), sink, notify_pid=os.getpid())
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert rc == 6 and got == [1]
    lines = sink.getvalue().decode().splitlines()
    assert lines[0] == "\x1b[1mone\x1b[0m" and lines[-1] == "two"
    assert [x for x in lines if "OUT_DIR_WRITE_FAILED" in x] == [
        "!!! OUT_DIR_WRITE_FAILED file=/dev/full detail=No space left on device: "
        "run.log stops here; this directory does not hold the whole run"]
    sink = io.BytesIO()
    assert tee_stripped(str(tmp_path / "gone" / "run.log"), io.BytesIO(b"x\n"), sink) == 6
    assert sink.getvalue().decode().endswith("x\n")
