"""campaign.sh's input checks: an unknown backend, odd device ids, and screen times that are
no time all stop it with exit 2 (or plan sanely) before anything is started or created."""

import subprocess

import pytest

from harness.runner import REPO_ROOT, base_env


def write_screen(path, rows):
    """rows: (op, elapsed_before, elapsed_after) as written in the table."""
    path.write_text("op\tverdict\telapsed_before\telapsed_after\n"
                    + "".join(f"{op}\tIR_CHANGED\t{b}\t{a}\n" for op, b, a in rows))
    return path


def campaign(tmp_path, **env):
    return subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path),
                          env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", DRY_RUN="1",
                                       CAMPAIGN_ROOT=tmp_path / "camp", **env))


def test_an_unknown_backend_exits_2_before_planning(tmp_path):
    """The check used to test `read`'s status: the error was printed, then the plan, exit 0."""
    screen = write_screen(tmp_path / "s.tsv", [("a", 5, 5)])
    r = campaign(tmp_path, SCREEN=screen, DEVICES="0,1", ZL_BACKEND="nosuch")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "unknown ZL_BACKEND 'nosuch'" in r.stderr
    assert "[partition]" not in r.stdout and "DRY_RUN" not in r.stdout
    assert not (tmp_path / "camp").exists()


@pytest.mark.parametrize("devices", ["0 1", "0,a;b"])
def test_a_device_id_that_is_not_a_plain_token_exits_2(tmp_path, devices):
    """"0 1" used to be planned as one device whose visibility value was "0 1"."""
    screen = write_screen(tmp_path / "s.tsv", [("a", 5, 5)])
    r = campaign(tmp_path, SCREEN=screen, DEVICES=devices)
    assert r.returncode == 2 and "not a device id" in r.stderr, r.stdout + r.stderr
    assert "bash ab_repeat.sh" not in r.stdout and not (tmp_path / "camp").exists()


@pytest.mark.parametrize("bad", ["nan", "-500"])
def test_a_time_that_is_no_time_plans_with_the_median(tmp_path, bad):
    """A nan elapsed time used to end the dry run in `nan: unbound variable`, exit 1."""
    screen = write_screen(tmp_path / "s.tsv", [("a", bad, 1), ("b", 5, 5)])
    r = campaign(tmp_path, SCREEN=screen, DEVICES="0,1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "device 0 (~1 min)" in r.stdout and "device 1 (~1 min)" in r.stdout, r.stdout
    assert "(the median)" in r.stderr and "unbound variable" not in r.stderr
