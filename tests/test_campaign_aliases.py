"""partition.py and campaign.sh read the command lines of their first version: `--format human`,
a verdict filter `IR_CHANGED` (that screen's one code verdict) over today's IR_CHANGED@<level>
rows, and per-device directories named card<N> beside today's device<N>."""

import csv
import subprocess
import sys

import pytest

from harness.runner import REPO_ROOT, base_env

HEADER = ("op\top_file\tdtypes\trows_before\trows_after\tkernels_before\tkernels_after\tcvt_before\t"
          "cvt_after\telapsed_before\telapsed_after\trc_before\trc_after\tverdict\n")
STUB = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.sh"


def write_screen(path, rows):
    """rows: (op, seconds of each side, verdict)."""
    path.write_text(HEADER + "".join(f"{op}\t{op}\t<all>\t6\t6\t1\t1\t0\t0\t{w}\t{w}\t0\t0\t{v}\n"
                                     for op, w, v in rows))
    return path


SCREEN_ROWS = [("softmax", 40, "IR_CHANGED@ttgir"), ("glu", 30, "IR_CHANGED@llir"),
               ("mm", 20, "IR_CHANGED@ptx"), ("relu", 10, "BINARY_CHANGED"),
               ("abs", 10, "NO_IR_DIFF"), ("exp", 10, "VARIANTS_DIFFER")]


def partition(screen, *args):
    return subprocess.run([sys.executable, str(REPO_ROOT / "partition.py"), "--screen", str(screen),
                           *args], capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=60)


def test_format_human_is_text(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", SCREEN_ROWS)
    text = partition(screen, "--devices", "0,1", "--format", "text")
    human = partition(screen, "--devices", "0,1", "--format", "human")
    assert text.returncode == human.returncode == 0, text.stderr + human.stderr
    assert human.stdout == text.stdout and "critical path" in human.stdout
    bad = partition(screen, "--devices", "0,1", "--format", "table")
    assert bad.returncode == 2 and "invalid choice: 'table'" in bad.stderr


@pytest.mark.parametrize("verdict", ["IR_CHANGED", "IR_CHANGED@*", " IR_CHANGED , "])
def test_a_filter_on_ir_changed_plans_every_level(tmp_path, verdict):
    screen = write_screen(tmp_path / "s.tsv", SCREEN_ROWS)
    r = partition(screen, "--devices", "0", "--verdict", verdict, "--format", "shell")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\t")[1].split() == ["softmax:softmax", "glu:glu", "mm:mm"]


def test_a_screen_of_the_first_version_still_plans(tmp_path):
    """Its rows say IR_CHANGED without a level: the default filter and IR_CHANGED take them."""
    screen = write_screen(tmp_path / "s.tsv", [("topk", 300, "IR_CHANGED"), ("exp", 30, "NO_IR_DIFF")])
    for args in ((), ("--verdict", "IR_CHANGED")):
        r = partition(screen, "--devices", "0", "--format", "shell", *args)
        assert r.returncode == 0 and r.stdout.split("\t")[1] == "topk:topk", r.stderr


def test_a_verdict_word_that_names_no_verdict_exits_2(tmp_path):
    """A typo used to plan nothing and exit 3, read as "nothing to plan"."""
    screen = write_screen(tmp_path / "s.tsv", SCREEN_ROWS)
    r = partition(screen, "--devices", "0", "--verdict", "IR_CHANGED,IR_CHANGD")
    assert r.returncode == 2 and "--verdict IR_CHANGD names no verdict" in r.stderr, r.stderr
    assert "IR_CHANGED: every IR_CHANGED@<level>" in r.stderr and r.stdout == ""
    assert partition(screen, "--devices", "0", "--verdict", "IR_CHANGED@sass").returncode == 2
    # known words the screen does not hold: nothing to plan, as before
    assert partition(screen, "--devices", "0", "--verdict", "WRONG_RESULTS").returncode == 3
    assert partition(screen, "--devices", "0", "--verdict", "IR_CHANGED@amdgcn").returncode == 3
    # a word only this screen holds (a later verdict) is a word
    other = write_screen(tmp_path / "o.tsv", [("relu", 5, "SOMETHING_NEW")])
    assert partition(other, "--devices", "0", "--verdict", "SOMETHING_NEW").returncode == 0


def test_campaign_dry_run_with_verdict_ir_changed(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", SCREEN_ROWS)
    root = tmp_path / "camp"
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True, timeout=120,
                       env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DEVICES="0",
                                    DRY_RUN="1", CAMPAIGN_ROOT=root, VERDICT="IR_CHANGED"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'OPS="softmax:softmax glu:glu mm:mm" bash ab_repeat.sh' in r.stdout
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True, timeout=120,
                       env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DEVICES="0",
                                    DRY_RUN="1", CAMPAIGN_ROOT=root, VERDICT="IR_CHANGD"))
    assert r.returncode == 2 and "names no verdict" in r.stderr, r.stdout + r.stderr
    assert not root.exists()


def test_campaign_card_names_lead_to_the_device_directories(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", [("relu", 10, "IR_CHANGED@ttgir"),
                                               ("abs", 5, "IR_CHANGED@ttgir")])
    root = tmp_path / "camp"
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True, timeout=240,
                       env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DEVICES="4,6",
                                    CAMPAIGN_ROOT=root, ROUNDS="2", TELEMETRY_INTERVAL="0",
                                    ZL_RUN_PYTEST=STUB, ZL_STUB_SWITCH="ZL_TEST_SWITCH"))
    assert r.returncode == 0, r.stdout + r.stderr
    for dev in ("4", "6"):
        assert (root / f"card{dev}").is_symlink() and (root / f"card{dev}.log").is_symlink()
        assert (root / f"card{dev}").resolve() == (root / f"device{dev}").resolve()
        assert (root / f"card{dev}.log").read_text() == (root / f"device{dev}.log").read_text() != ""
    with open(root / "status.tsv", newline="") as fh:   # each cell counted once, not per name
        assert len(list(csv.DictReader(fh, delimiter="\t"))) == 8
    # the first version's report command, through the card path
    rep = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--ab-rounds",
                          str(root / "card4" / "relu"), "--label", "relu"],
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert rep.returncode == 0 and "[ab-rounds] relu: 2 rounds" in rep.stdout, rep.stdout + rep.stderr
    assert "card<D> links to device<D>" in r.stdout
