"""zl.runlog.trim: quoted source goes, the reasons a node failed stay (also with time stamps)."""

import subprocess
import sys
from pathlib import Path

import pytest

from zl.runlog.trim import trimmed

ROOT = Path(__file__).resolve().parents[1]
# the shapes of upstream's logs on the H200, with made-up source lines
LOG = """collecting ... collected 1 item
benchmark/test_x.py::test_x FAILED
=================================== FAILURES ===================================
_________________________________ test_x _________________________________
>   secret_kernel_call(a, b)
E   torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing
    Search for `cudaErrorStreamCaptureUnsupported' in the CUDA docs
/fg/benchmark/base.py:481: Failed: CUDA error: operation failed due to a previous error during capture
=============================== warnings summary ===============================
benchmark/test_x.py::test_x
  /fg/src/flag_gems/ops/x.py:40: UserWarning: Logical operators 'and' and 'or' are deprecated
    out_mask = secret_mask and (offsets < n)
  Enable tracemalloc to get traceback where the object was allocated.
Traceback (most recent call last):
  File "/fg/src/flag_gems/ops/x.py", line 12, in x
    return secret_body(y)
RuntimeError: boom
"""
SECRETS = ("secret_kernel_call", "secret_mask", "secret_body")
KEPT = ("E   torch.AcceleratorError", "base.py:481: Failed", "x.py:40: UserWarning",
        "Enable tracemalloc", 'File "/fg/src/flag_gems/ops/x.py", line 12', "RuntimeError: boom")


def test_quoted_source_goes_and_reasons_stay():
    out = trimmed(LOG)
    assert not any(s in out for s in SECRETS)
    assert all(k in out for k in KEPT)
    assert out.rstrip().endswith("4 quoted source line(s) trimmed]")
    assert trimmed("plain\n") == "plain\n"


def test_time_stamped_lines_are_matched_past_their_stamp():
    stamped = "".join(f"{1796333812 + i}.25 {line}\n" for i, line in enumerate(LOG.splitlines()))
    out = trimmed(stamped)
    assert not any(s in out for s in SECRETS)
    assert "1796333817.25 E   torch.AcceleratorError" in out
    last = 1796333812 + len(LOG.splitlines()) - 1
    assert out.splitlines()[-1] == f"{last}.25 [zl.runlog.trim: 4 quoted source line(s) trimmed]"
    tabbed = "".join(f"{i * 0.5:.3f}\t{line}\n" for i, line in enumerate(LOG.splitlines()))
    out = trimmed(tabbed)                 # graph_timer_cost.py's timeline.tsv
    assert not any(s in out for s in SECRETS) and "2.500\tE   torch.AcceleratorError" in out


def test_cli_writes_the_file_and_names_bad_input(tmp_path):
    src, dest = tmp_path / "in.log", tmp_path / "out.log"
    src.write_text(LOG)
    run = lambda *a: subprocess.run([sys.executable, "-m", "zl.runlog.trim", *a], cwd=ROOT,
                                    capture_output=True, text=True)
    assert run(str(src), str(dest)).returncode == 0
    assert dest.read_text() == trimmed(LOG)
    bad = run(str(tmp_path / "missing.log"))
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr
    assert run().returncode == 2
    assert run("--help").returncode == 0


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_cli_names_an_out_it_cannot_write_and_exits_2(tmp_path, where):
    """OUT a directory ended in IsADirectoryError, OUT under a file in FileExistsError."""
    src = tmp_path / "in.log"
    src.write_text(LOG)
    (tmp_path / "afile").write_text("")
    out = tmp_path if where == "a directory" else tmp_path / "afile" / "x.log"
    r = subprocess.run([sys.executable, "-m", "zl.runlog.trim", str(src), str(out)], cwd=ROOT,
                       capture_output=True, text=True)
    why = "it is a directory" if where == "a directory" else f"{tmp_path / 'afile'} is not a directory"
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"zl.runlog.trim: cannot write {out}: {why}" in r.stderr
    assert (tmp_path / "afile").read_text() == ""
