"""benchmarks/cost_profile.py and _cprofile_python.sh: which functions take zl_bench's extra
seconds over upstream, from cProfile files of both sides."""

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "benchmarks"


def _mod():
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("cost_profile", SCRIPTS / "cost_profile.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(SCRIPTS))


def _profile(tmp_path, out: Path, body: str, module_dir: str):
    """cProfile a script that imports a helper module living in `module_dir` (a per-run
    temporary name, as FlagGems' generated code lives in each run's own cache)."""
    gen = tmp_path / module_dir
    gen.mkdir(parents=True, exist_ok=True)
    (gen / "gen_mod.py").write_text("def generated():\n    return sum(i * i for i in range(20000))\n")
    script = tmp_path / f"{out.parent.name}_main.py"
    script.write_text(f"import sys, time\nsys.path.insert(0, {str(gen)!r})\nimport gen_mod\n{body}")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), str(script)], check=True)


def test_compare_names_the_function_that_took_the_extra_time(tmp_path):
    work = tmp_path / "work"
    common = "for _ in range(3):\n    gen_mod.generated()\n"
    _profile(tmp_path, work / "idx" / "upstream" / "profile.pstats", common, "run1/triton_ab12/")
    _profile(tmp_path, work / "idx" / "after1" / "profile.pstats",
             common + "def extra_cost():\n    time.sleep(0.3)\nextra_cost()\n", "run2/triton_zz99/")
    proc = subprocess.run([sys.executable, str(SCRIPTS / "cost_profile.py"), "compare",
                           "--work", str(work), "--out", str(tmp_path / "p.md"), "--top", "3"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "p.md").read_text()
    own = text.split("own time (tottime)")[1].split("cumulative time")[0]
    first = [line for line in own.splitlines() if line.startswith("| `")][0]
    assert "time.sleep" in first
    delta = float(first.rsplit("|", 2)[-2])
    assert 0.25 <= delta < 1.0
    cum = text.split("Largest increases in cumulative time")[1]
    assert "extra_cost" in cum
    # the generated module matched across the two runs' temporary folders: one key, not two
    mod = _mod()
    keys = set(mod.load(work / "idx" / "upstream" / "profile.pstats")) & set(
        mod.load(work / "idx" / "after1" / "profile.pstats"))
    assert any("gen_mod.py" in k and "generated" in k for k in keys)
    assert text.count("## idx") == 1


def test_compare_refuses_a_work_folder_without_pairs_or_with_a_broken_file(tmp_path):
    (tmp_path / "w" / "op" / "upstream").mkdir(parents=True)
    cmd = [sys.executable, str(SCRIPTS / "cost_profile.py"), "compare", "--work", str(tmp_path / "w"),
           "--out", str(tmp_path / "o.md")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "no operator with both" in proc.stderr
    (tmp_path / "w" / "op" / "upstream" / "profile.pstats").write_text("not a profile")
    (tmp_path / "w" / "op" / "after1").mkdir()
    (tmp_path / "w" / "op" / "after1" / "profile.pstats").write_text("not a profile")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "not a cProfile file" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o.md").exists()


def test_wrap_profiles_upstream_pytest_and_points_run_pytest_at_the_wrapper(tmp_path):
    mod = _mod()
    up = mod.wrap("upstream", [sys.executable, "-u", "-m", "pytest", "-s", "x.py"], {}, tmp_path)
    assert up == [sys.executable, "-u", "-m", "cProfile", "-o", str(tmp_path / "profile.pstats"),
                  "-m", "pytest", "-s", "x.py"]
    env = {}
    zl = mod.wrap("after1", ["bash", "run_pytest.sh"], env, tmp_path)
    assert zl == ["bash", "run_pytest.sh"]
    assert env["ZL_PYTHON"].endswith("_cprofile_python.sh") and env["ZL_CPROFILE_OUT"] == str(tmp_path / "profile.pstats")


def test_wrapper_profiles_only_the_pytest_call(tmp_path):
    """run_pytest.sh also calls its python for zl.prepare and zl.term; those must run plainly
    (a profile of them would overwrite pytest's)."""
    out = tmp_path / "p.pstats"
    env = dict(os.environ, ZL_CPROFILE_PY=sys.executable, ZL_CPROFILE_OUT=str(out))
    wrapper = str(SCRIPTS / "_cprofile_python.sh")
    plain = subprocess.run(["bash", wrapper, "-c", "print('plain')"], env=env, capture_output=True, text=True)
    assert plain.returncode == 0 and plain.stdout.strip() == "plain" and not out.exists()
    prof = subprocess.run(["bash", wrapper, "-u", "-m", "pytest", "--version"], env=env,
                          capture_output=True, text=True)
    assert prof.returncode == 0 and "pytest" in (prof.stdout + prof.stderr)
    assert out.is_file() and _mod().total(_mod().load(out)) > 0


def test_graph_timer_cost_run_once_profiles_when_asked(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("graph_timer_cost", SCRIPTS / "graph_timer_cost.py")
    gtc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gtc)
    seen = []
    monkeypatch.setattr(gtc, "run_stamped", lambda cmd, cwd, env, t: seen.append((cmd, env)) or (0, []))
    args = types.SimpleNamespace(flaggems_dir=tmp_path, shape_file=None, run_timeout_s=5, profile=True)
    gtc.run_once("upstream", "abs", "abs", args, tmp_path / "upstream")
    gtc.run_once("after1", "abs", "abs", args, tmp_path / "after1")
    assert "cProfile" in seen[0][0] and seen[1][1]["ZL_CPROFILE_OUT"].startswith(str(tmp_path / "after1"))
    args.profile = False
    gtc.run_once("after1", "abs", "abs", args, tmp_path / "plain")
    assert "cProfile" not in seen[2][0] and "ZL_CPROFILE_OUT" not in seen[2][1]
