"""benchmarks/report_attacks.py: every attack listed once under a pinned name, a few fast
attacks run for real and hold, and a zl_bench that gives in is reported BROKEN (exit 1)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runner import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "report_attacks.py"

# Pinned, not read from the script: an attack that disappears must fail here.
EXPECTED = [
    "llir_only_change_reported_as_aa", "page_without_the_results_verdict",
    "wrong_results_below_the_speedup", "near_zero_torch_reference_ratio", "latency_of_1e-320",
    "mathtext_in_a_shape_label", "report_output_inside_an_input_run", "stale_page_after_a_failed_report",
    "replay_paired_with_a_run_it_did_not_replay", "side_a_recorded_again_after_b_replayed_it",
    "ab_rounds_cell_replayed_an_edited_record", "replayed_config_outside_the_tuners_candidates",
    "replay_whose_every_key_fell_back", "runs_on_two_gpu_models", "interpreter_run_paired_with_a_gpu_run",
    "run_log_cut_before_pytests_final_line", "identity_says_the_run_never_finished",
    "shape_file_recursive_alias", "shape_file_not_utf8", "shape_file_alias_bomb", "shape_file_of_100k_shapes",
    "shape_file_tensor_beyond_memory", "shape_file_dimension_beyond_int64", "shape_file_letter_o_for_zero",
    "shape_file_is_a_device_or_a_fifo",
    "tmpdir_missing", "tmpdir_read_only", "out_dir_read_only", "out_dir_disk_full", "out_dir_fills_up_mid_run",
    "out_dir_is_dev_full", "two_runs_on_one_out_dir", "two_batches_on_one_batch_dir",
    "used_batch_dir_without_resume", "resume_with_other_dtypes", "resume_with_another_shape_file",
    "resume_with_another_flaggems_tree", "screen_stopped_mid_list", "screen_stopped_in_its_first_cell",
    "campaign_preflight_writes_the_users_tuner_cache", "demo_warns_about_its_own_defaults",
]
# Attacks that start no shared run and stop at a refusal: about a second each.
FAST = ["tmpdir_missing", "out_dir_disk_full", "out_dir_is_dev_full", "shape_file_not_utf8",
        "shape_file_letter_o_for_zero"]


def script(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO_ROOT))


def test_list_names_every_attack_once_and_runs_nothing(tmp_path):
    r = script("--list")
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    names = [row[0] for row in rows]
    assert names == EXPECTED
    assert all(len(row) == 2 and len(row[1]) > 20 for row in rows), rows   # each says what it tries


def test_help_says_what_it_does_and_its_exit_codes():
    r = script("--help")
    assert r.returncode == 0
    for needle in ("--only", "--list", "--work-dir", "--json", "HELD <name>", "BROKEN <name>",
                   "attacks tried N, held M", "Exit: 0"):
        assert needle in r.stdout, needle


@pytest.mark.parametrize("args, needle", [
    (("--only", "no_such_attack"), "unknown attack(s): no_such_attack"),
    (("--only", "tmpdir_missing", "--work-dir", "__USED__"), "is not an empty directory"),
    (("--only", "tmpdir_missing", "--zl-root", "__EMPTY__"), "holds no run_pytest.sh"),
    (("--bogus",), "unrecognized arguments"),
])
def test_usage_errors_exit_2(tmp_path, args, needle):
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep")
    args = [str(used) if a == "__USED__" else str(tmp_path / "empty") if a == "__EMPTY__" else a for a in args]
    r = script(*args)
    assert r.returncode == 2 and needle in r.stderr, r.stdout + r.stderr
    assert r.stdout == "" and (used / "mine.txt").read_text() == "keep"


def test_fast_attacks_hold_against_this_checkout(tmp_path):
    out = tmp_path / "attacks.json"
    r = script("--only", ",".join(FAST), "--json", out, "--work-dir", tmp_path / "work")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [x.split(":")[0] for x in lines[:-1]] == [f"HELD {n}" for n in FAST], r.stdout
    assert all(re.search(r" -> .*exit [236]\b", x) for x in lines[:-1]), r.stdout
    assert lines[-1] == f"attacks tried {len(FAST)}, held {len(FAST)}"
    d = json.loads(out.read_text())
    assert (d["tried"], d["held"]) == (len(FAST), len(FAST))
    assert [(a["name"], a["status"], a["problems"]) for a in d["attacks"]] == [(n, "held", []) for n in FAST]


def _fake_root(tmp_path: Path, body: str) -> Path:
    """A zl_bench 'checkout' whose run_pytest.sh is `body`: the attacks run against it."""
    root = tmp_path / "fake_zl"
    root.mkdir()
    (root / "run_pytest.sh").write_text("#!/usr/bin/env bash\n" + body)
    return root


@pytest.mark.parametrize("body, missed", [
    # the behaviour before TMPDIR was checked: the run goes ahead and leaves a run directory
    ('mkdir -p "$OUT_DIR" && echo ran > "$OUT_DIR/run.log"; exit 0\n',
     ["exit 0, expected 2", "the refusal lacks \"!!! TMPDIR=", "OUT_DIR was created"]),
    # the right exit status for the wrong reason is not a hold either
    ('echo "!!! something else went wrong" >&2; exit 2\n', ["the refusal lacks \"!!! TMPDIR="]),
])
def test_a_zl_bench_that_gives_in_is_reported_broken(tmp_path, body, missed):
    out = tmp_path / "attacks.json"
    r = script("--only", "tmpdir_missing", "--zl-root", _fake_root(tmp_path, body), "--json", out)
    assert r.returncode == 1, r.stdout + r.stderr
    first, last = r.stdout.splitlines()
    assert first.startswith("BROKEN tmpdir_missing: run_pytest.sh with TMPDIR=") and last == "attacks tried 1, held 0"
    for problem in missed:
        assert problem in first, first
    (att,) = json.loads(out.read_text())["attacks"]
    assert att["status"] == "broken" and len(att["problems"]) == len(missed)


def test_an_attack_whose_shared_run_cannot_be_built_is_not_credited(tmp_path):
    """A record run that fails leaves every attack on its copies unjudged: BROKEN, never HELD
    (a refusal of broken runs proves nothing about the attack)."""
    root = _fake_root(tmp_path, 'echo "!!! PREFLIGHT_FAILED check=interpreter" >&2; exit 3\n')
    r = script("--only", "runs_on_two_gpu_models", "--zl-root", root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("BROKEN runs_on_two_gpu_models: ") and "not judged" in r.stdout
    assert "record run A: run_pytest.sh exited 3: !!! PREFLIGHT_FAILED check=interpreter" in r.stdout
