"""telemetry.py against fake sampler binaries on PATH (shell scripts printing recorded output):
the TSV it writes, quiet exits with a reason in OUT.err, usage errors, signals."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import telemetry  # noqa: E402
from zl.backends import ALL_VISIBILITY_KEYS, TELEMETRY_FIELDS, get_backend  # noqa: E402

NVSMI_CSV = "0, 1980, 3201, 41, 122.35, 63\n1, 1755, 3201, 38, [N/A], 0\n"
MTGMI_JSON = ('{"Attached GPUs": "1", "GPU": [{"Index": "7",'
              ' "Temperature": {"GPU Current Temp": "36C"},'
              ' "Clocks": {"Graphics": "1888MHz", "Memory": "2500MHz"},'
              ' "Power Readings": {"Power Draw ": "477.68W"},'
              ' "Utilization": {"Gpu": "87%"}}]}')


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A clean environment with an empty bin dir first on PATH; returns a tool installer."""
    for key in ALL_VISIBILITY_KEYS + ("ZL_DEVICE", "ZL_BACKEND", "TELEMETRY_INTERVAL"):
        monkeypatch.delenv(key, raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin")

    class Tools:
        calls = tmp_path / "calls.log"

        @staticmethod
        def install(name: str, body: str) -> Path:
            """A fake sampler: logs its argv to calls.log, then runs body (sh)."""
            script = bindir / name
            script.write_text(f'#!/bin/sh\necho "$*" >> "{Tools.calls}"\n{body}\n')
            script.chmod(0o755)
            return script

        @staticmethod
        def argv_log():
            return Tools.calls.read_text().splitlines() if Tools.calls.exists() else []

        @staticmethod
        def nvsmi(csv: str = NVSMI_CSV):
            return Tools.install("nvidia-smi", f"printf '{csv}'")

    return Tools


def _rows(path: Path):
    lines = path.read_text().splitlines()
    return lines[0], [ln.split("\t") for ln in lines[1:]]


def test_samples_into_tsv(env, tmp_path):
    env.nvsmi()
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--interval", "0.01", "--count", "3"]) == 0
    header, rows = _rows(out)
    assert header == "timestamp\tindex\tsm_clock_mhz\tmem_clock_mhz\ttemp_c\tpower_w\tutil_pct"
    assert len(rows) == 6  # 3 samples x 2 GPUs
    for row in rows:
        assert len(row) == 7
        assert dt.datetime.fromisoformat(row[0]).tzinfo is not None
    assert [r[1:] for r in rows[:2]] == [["0", "1980", "3201", "41", "122.35", "63"],
                                         ["1", "1755", "3201", "38", "", "0"]]
    assert len(env.argv_log()) == 3
    assert not (tmp_path / "telemetry.err").exists()


def test_header_matches_backend_fields():
    assert telemetry.HEADER.split("\t") == ["timestamp"] + list(TELEMETRY_FIELDS)


def test_musa_sampler_gives_the_same_columns(env, tmp_path):
    env.install("mthreads-gmi", f"echo '{MTGMI_JSON}'")
    out = tmp_path / "t.tsv"
    assert telemetry.main([str(out), "--backend", "musa", "--device", "7",
                           "--interval", "0.01", "--count", "1"]) == 0
    header, rows = _rows(out)
    assert header == telemetry.HEADER
    assert [r[1:] for r in rows] == [["7", "1888", "2500", "36", "477.68", "87"]]
    assert env.argv_log() == ["-q -d TEMPERATURE,CLOCK,POWER,UTILIZATION --json -i 7"]


@pytest.mark.parametrize("how", ["env", "flag"])
def test_interval_zero_is_off(env, tmp_path, monkeypatch, how):
    env.nvsmi()
    out = tmp_path / "t.tsv"
    args = [str(out)]
    if how == "env":
        monkeypatch.setenv("TELEMETRY_INTERVAL", "0")
    else:
        args += ["--interval", "0"]
    assert telemetry.main(args) == 0
    assert not out.exists() and not (tmp_path / "t.err").exists()
    assert env.argv_log() == []


def test_interval_from_env(env, tmp_path, monkeypatch):
    env.nvsmi()
    monkeypatch.setenv("TELEMETRY_INTERVAL", "0.01")
    out = tmp_path / "t.tsv"
    assert telemetry.main([str(out), "--count", "2"]) == 0
    assert len(_rows(out)[1]) == 4


@pytest.mark.parametrize("bad", ["abc", "-1", "nan", "inf"])
def test_bad_interval_is_a_usage_error(env, tmp_path, monkeypatch, capsys, bad):
    env.nvsmi()
    monkeypatch.setenv("TELEMETRY_INTERVAL", bad)
    out = tmp_path / "t.tsv"
    assert telemetry.main([str(out)]) == 2
    assert "[telemetry] error: interval must be" in capsys.readouterr().err
    assert not out.exists()
    assert telemetry.main([str(out), "--interval", bad]) == 2


def test_usage_errors(env, tmp_path, capsys):
    assert telemetry.main([str(tmp_path / "t.tsv"), "--backend", "tpu"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'tpu'" in err and "cuda" in err
    assert telemetry.main([]) == 2
    assert "OUT.tsv is required" in capsys.readouterr().err
    assert telemetry.main([str(tmp_path / "t.tsv"), "--count", "0"]) == 2


@pytest.mark.parametrize("where", ["a directory", "its .err a directory", "no such parent",
                                   "a file as parent"])
def test_an_out_that_cannot_be_a_file_is_a_usage_error(env, tmp_path, capsys, where):
    """OUT a directory used to end in IsADirectoryError (a missing parent in FileNotFoundError)."""
    env.nvsmi()
    (tmp_path / "afile").write_text("")
    (tmp_path / "busy.err").mkdir()
    out = {"a directory": tmp_path, "its .err a directory": tmp_path / "busy.tsv",
           "no such parent": tmp_path / "nope" / "t.tsv",
           "a file as parent": tmp_path / "afile" / "t.tsv"}[where]
    assert telemetry.main([str(out), "--interval", "0.01", "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert "[telemetry] error:" in err and str(out) in err and "Traceback" not in err
    assert env.argv_log() == []          # refused before any sample
    assert telemetry.main([str(out), "--interval", "0"]) == 0   # sampling off writes nothing


def test_an_out_that_cannot_be_written_exits_2_naming_it(env, tmp_path, capsys, monkeypatch):
    env.nvsmi()
    out = tmp_path / "t.tsv"

    def refuse(path, text):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(telemetry, "_append", refuse)
    assert telemetry.main([str(out), "--interval", "0.01", "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: cannot write {out}" in err and "Permission denied" in err


def test_the_first_telemetry_py_command_lines(env, tmp_path, capsys):
    """`--run` was the first telemetry.py's "sample until killed" flag (stdout, no file): beside
    OUT.tsv it samples as OUT.tsv alone does; alone, or with --print-command, it is a usage
    error naming OUT.tsv, with no sampler started. Without --run that tool printed the
    command; now that needs --print-command, and the error says so."""
    env.nvsmi()
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main(["--backend", "cuda", "--interval", "0.01", "--run", str(out),
                           "--count", "2"]) == 0
    header, rows = _rows(out)
    assert header == telemetry.HEADER and len(rows) == 4
    capsys.readouterr()
    assert telemetry.main(["--backend", "musa", "--device", "7", "--interval", "5", "--run"]) == 2
    err = capsys.readouterr().err
    assert "--run no longer writes to stdout; name the file instead: telemetry.py OUT.tsv" in err
    assert telemetry.main([str(out), "--run", "--print-command"]) == 2
    assert "--run samples and --print-command only prints" in capsys.readouterr().err
    assert len(env.argv_log()) == 2   # the two samples of the accepted form, nothing after
    assert telemetry.main(["--backend", "cuda"]) == 2
    assert "OUT.tsv is required (or --print-command)" in capsys.readouterr().err


def test_unknown_zl_backend_is_a_usage_error(env, tmp_path, monkeypatch):
    monkeypatch.setenv("ZL_BACKEND", "tpu")
    assert telemetry.main([str(tmp_path / "t.tsv"), "--count", "1"]) == 2


@pytest.mark.parametrize("backend", ["ascend", "rocm"])
def test_backend_without_sampler_exits_quietly(env, tmp_path, backend):
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--backend", backend, "--count", "1"]) == 0
    assert not out.exists()
    reason = (tmp_path / "telemetry.err").read_text()
    assert f"backend {backend} has no telemetry sampler" in reason


def test_missing_binary(env, tmp_path):
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--count", "1"]) == 0
    assert not out.exists()
    assert "nvidia-smi not found on PATH" in (tmp_path / "telemetry.err").read_text()


def test_not_permitted(env, tmp_path):
    env.install("nvidia-smi", "echo 'Insufficient Permissions' >&2; exit 4")
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--count", "1"]) == 0
    assert not out.exists()
    reason = (tmp_path / "telemetry.err").read_text()
    assert "nvidia-smi exited 4: Insufficient Permissions" in reason


def test_unreadable_output(env, tmp_path):
    env.install("nvidia-smi", "echo 'No devices were found'")
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--count", "1"]) == 0
    assert not out.exists()
    assert "printed nothing readable" in (tmp_path / "telemetry.err").read_text()


def test_stale_err_is_removed_on_success(env, tmp_path):
    env.nvsmi()
    (tmp_path / "telemetry.err").write_text("old reason\n")
    assert telemetry.main([str(tmp_path / "telemetry.tsv"), "--count", "1"]) == 0
    assert not (tmp_path / "telemetry.err").exists()


def test_gap_mid_run_is_recorded_and_sampling_continues(env, tmp_path):
    # Succeeds on the first and third call, fails on the second.
    counter = tmp_path / "n"
    env.install("nvidia-smi", (
        f'n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{counter}"\n'
        f'if [ $n -eq 2 ]; then echo "GPU is lost" >&2; exit 15; fi\n'
        f"printf '{NVSMI_CSV}'"))
    out = tmp_path / "telemetry.tsv"
    assert telemetry.main([str(out), "--interval", "0.01", "--count", "3"]) == 0
    assert len(_rows(out)[1]) == 4
    gaps = (tmp_path / "telemetry.err").read_text().splitlines()
    assert len(gaps) == 1 and "sample failed: nvidia-smi exited 15: GPU is lost" in gaps[0]


def test_appends_without_a_second_header(env, tmp_path):
    env.nvsmi()
    out = tmp_path / "t.tsv"
    for _ in range(2):
        assert telemetry.main([str(out), "--interval", "0.01", "--count", "1"]) == 0
    lines = out.read_text().splitlines()
    assert lines.count(telemetry.HEADER) == 1 and len(lines) == 5


def test_refuses_to_append_to_a_foreign_file(env, tmp_path, capsys):
    env.nvsmi()
    out = tmp_path / "t.tsv"
    out.write_text("round\top\tside\n1\tsoftmax\tA\n")
    assert telemetry.main([str(out), "--count", "1"]) == 2
    assert out.read_text() == "round\top\tside\n1\tsoftmax\tA\n"
    assert "not the telemetry header" in capsys.readouterr().err


@pytest.mark.parametrize("setup,expected_tail", [
    ({"args": ["--device", "3"]}, "-i 3"),
    ({"ZL_DEVICE": "2"}, "-i 2"),
    ({"CUDA_VISIBLE_DEVICES": "5"}, "-i 5"),
    ({"CUDA_VISIBLE_DEVICES": "5,6"}, "nounits"),       # a set of cards: sample them all
    ({"MUSA_VISIBLE_DEVICES": "5"}, "nounits"),         # another vendor's variable: ignored
    ({"ZL_DEVICE": "2", "args": ["--device", "4"]}, "-i 4"),
])
def test_device_selection(env, tmp_path, monkeypatch, setup, expected_tail):
    env.nvsmi()
    for key, value in setup.items():
        if key != "args":
            monkeypatch.setenv(key, value)
    out = tmp_path / "t.tsv"
    assert telemetry.main([str(out), "--count", "1"] + setup.get("args", [])) == 0
    assert env.argv_log()[0].endswith(expected_tail)


def test_resolve_device(monkeypatch):
    musa = get_backend("musa")
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "7")
    assert telemetry.resolve_device(musa, "") == "7"
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "0,1,2")
    assert telemetry.resolve_device(musa, "") == ""
    assert telemetry.resolve_device(musa, " 3 ") == "3"


def test_print_command(env, capsys):
    assert telemetry.main(["--print-command", "--backend", "musa", "--device", "7"]) == 0
    assert capsys.readouterr().out.strip() == (
        "mthreads-gmi -q -d TEMPERATURE,CLOCK,POWER,UTILIZATION --json -i 7")
    assert telemetry.main(["--print-command", "--backend", "ascend"]) == 0
    assert capsys.readouterr().out.strip() == ""


def test_err_path():
    assert telemetry.err_path("runs/x/telemetry.tsv") == Path("runs/x/telemetry.err")
    assert telemetry.err_path("telemetry") == Path("telemetry.err")


def test_hanging_sampler_times_out(env):
    env.install("nvidia-smi", "exec sleep 30")
    argv = get_backend("cuda").telemetry_command("")
    start = time.monotonic()
    with pytest.raises(telemetry.SamplerUnavailable, match="timed out after 0.3 s"):
        telemetry.sample(get_backend("cuda"), argv, timeout=0.3)
    assert time.monotonic() - start < 15   # not the 30 s the sampler would take


def test_signal_handlers_are_restored(env, tmp_path):
    env.nvsmi()
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    assert telemetry.main([str(tmp_path / "t.tsv"), "--count", "1"]) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# --- the real CLI in a subprocess ---------------------------------------------------------------

def _spawn(out: Path, *extra: str):
    return subprocess.Popen([sys.executable, str(ROOT / "telemetry.py"), str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_rows(out: Path, n: int, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) >= n + 1:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {n} rows in {out} after {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(env, tmp_path, sig):
    env.nvsmi()
    out = tmp_path / "telemetry.tsv"
    proc = _spawn(out, "--interval", "0.05")
    _wait_for_rows(out, 4, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    text = out.read_text()
    assert text.endswith("\n")
    assert all(len(line.split("\t")) == 7 for line in text.splitlines())


def test_signal_during_a_hanging_sample_does_not_wait_it_out(env, tmp_path):
    counter, hanging = tmp_path / "n", tmp_path / "hanging"
    env.install("nvidia-smi", (
        f'if [ -e "{counter}" ]; then touch "{hanging}"; exec sleep 30; fi\n'
        f'touch "{counter}"\nprintf \'{NVSMI_CSV}\''))
    out = tmp_path / "telemetry.tsv"
    proc = _spawn(out, "--interval", "0.05")
    _wait_for_rows(out, 2, proc)
    deadline = time.monotonic() + 120   # the second sample is now starting to hang in `sleep 30`
    while not hanging.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hanging.exists(), "the second sample never started"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert time.monotonic() - start < 15   # not the 30 s the sample would take
    assert len(out.read_text().splitlines()) == 3


def test_stops_when_its_parent_is_sigkilled(env, tmp_path):
    """A driver killed with SIGKILL runs no trap: its telemetry must not append forever."""
    env.nvsmi()
    out = tmp_path / "telemetry.tsv"
    pidfile = tmp_path / "tele.pid"
    driver = subprocess.Popen(["bash", "-c", f'"{sys.executable}" "{ROOT / "telemetry.py"}" '
                               f'"{out}" --interval 0.05 & echo $! > "{pidfile}"; wait'])
    _wait_for_rows(out, 3, driver)
    tele = int(pidfile.read_text())
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 60   # it checks its parent every interval; 60 s: a loaded machine
    while time.monotonic() < deadline:
        if not _running(tele):
            break
        time.sleep(0.1)
    else:
        os.kill(tele, signal.SIGKILL)
        raise AssertionError("telemetry kept running after its parent was SIGKILLed")
    size = out.stat().st_size
    time.sleep(0.3)
    assert out.stat().st_size == size


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit may wait for a slow reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_parent_alive_checks_reparenting():
    assert telemetry._parent_alive(os.getppid())
    assert not telemetry._parent_alive(os.getpid())   # not our parent: reparent check


def test_batch_sampler_records_clocks_and_the_summary_reads_old_and_new_files(env, tmp_path):
    """UtilizationSampler (the throughput tools' 100 ms sampler) runs nvidia-smi's timestamp and
    the CUDA query with -lms 100 and leads each line with that stamp as an epoch second; its
    summary reads those lines (SM clock over busy samples, hottest reading) and the older files
    of one utilization number per line alike."""
    env.nvsmi("2026/12/06 21:00:00.100, 0, 1980, 3201, 41, 122.35, 63\\n"
              "2026/12/06 21:00:00.200, 0, 1755, 3201, 44, 300.10, 80\\n"
              "2026/12/06 21:00:00.300, 0, 1410, 3201, 39, 60.00, 0\\n"
              "[N/A], 0, 1980, 3201, 40, [N/A], 55\\n'; exec sleep 30; printf '")
    out = tmp_path / "util.txt"
    sampler = telemetry.UtilizationSampler(out)
    deadline = time.monotonic() + 30
    while len(out.read_text().splitlines()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    query = ("--query-gpu=" + ",".join(["timestamp", "index", "clocks.sm", "clocks.mem", "temperature.gpu",
                                        "power.draw", "utilization.gpu"]))
    assert env.argv_log() == [f"{query} --format=csv,noheader,nounits -lms 100"]
    s = telemetry.utilization_summary(out)
    assert s["samples"] == 4 and s["busy_share"] == 0.75 and abs(s["mean_util"] - 49.5) < 1e-9
    # busy samples only: 1980, 1755, 1980 (the idle 1410 is the card resting, not throttled)
    assert (s["sm_clock_busy_median"], s["sm_clock_busy_min"], s["sm_clock_busy_p05"]) == (1980, 1755, 1755)
    assert s["sm_clock_max"] == 1980 and s["temp_max_c"] == 44
    assert telemetry.clock_line(s) == ("SM clock over busy samples: median 1980 MHz, 5th percentile 1755, "
                                       "lowest 1755 (highest seen 1980); hottest 44 C.")
    # each line led by the epoch second nvidia-smi took it (local time, converted where it was
    # taken); a stamp that does not parse leaves its line unstamped. The samples inside a run's
    # timed stretches give the clock it timed at
    rows = telemetry.read_samples(out)
    t0 = dt.datetime(2026, 12, 6, 21, 0, 0, 100000).timestamp()
    assert [r["t"] for r in rows] == [round(t0, 3), round(t0 + 0.1, 3), round(t0 + 0.2, 3), None]
    assert telemetry.clock_during(rows, [[t0, t0 + 0.15]]) == (1755 + 1980) / 2
    assert telemetry.clock_during(rows, [[t0 + 0.15, t0 + 5]]) == 1410      # the unstamped line claims none
    assert telemetry.clock_during(rows, [[t0 + 1, t0 + 2]]) is None
    unstamped = tmp_path / "unstamped.txt"      # the query's lines as nvidia-smi prints them
    unstamped.write_text("0, 1980, 3201, 41, 122.35, 63\n")
    assert [(r["t"], r["sm_clock_mhz"]) for r in telemetry.read_samples(unstamped)] == [(None, 1980)]
    old = tmp_path / "old.txt"
    old.write_text("0\n50\n100\n")
    s = telemetry.utilization_summary(old)
    assert s == {"samples": 3, "busy_share": 2 / 3, "mean_util": 50.0}
    assert telemetry.clock_line(s) == "" and telemetry.utilization_summary(tmp_path / "none.txt") is None


def test_clock_split_names_the_nodes_whose_sides_timed_at_other_clocks():
    sides = [("a", 1980, 1980, 0.001), ("b", 1980, 1755, 0.04), ("c", 1755, 1980, 0.02),
             ("d", 1980, None, 0.5), ("e", 1980, 1975, None)]
    c = telemetry.clock_split(sides)
    assert c["nodes"] == 3 and c["apart_nodes"] == ["b", "c"] and (c["clock_min"], c["clock_max"]) == (1755, 1980)
    assert abs(c["aa_apart"] - 0.03) < 1e-12 and c["aa_together"] == 0.001
    assert telemetry.clock_split([("d", 1980, None, 0.5)]) is None
