"""zl.ir.fingerprint: the one IR rule every A/B tool uses (and its shell wrapper)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from zl.ir import fingerprint as fp

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ir"

MODULE = ('module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, %s'
          'ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32} {\n'
          '  tt.func public @k(%%arg0: !tt.ptr<f16>) {\n%s    tt.return\n  }\n}\n')
CVT = "    %0 = ttg.convert_layout %a : tensor<128xf16, #blocked> -> tensor<128xf16, #blocked1>\n"


def make_run(root: Path, files: dict, index_rows=None) -> Path:
    ttgir = root / "ttgir"
    ttgir.mkdir(parents=True)
    for rel, text in files.items():
        p = ttgir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    header = "shape\tkernel\tfile\tlaunches\tsweep_launches\tnum_warps\tnum_stages\tconstexprs\tcache_hash"
    rows = [header] + ["\t".join([s, k, f, str(n), "0", "4", "3", "{}", "H"]) for s, k, f, n in (index_rows or [])]
    (ttgir / "index.tsv").write_text("\n".join(rows) + "\n")
    (ttgir / "naming.md").write_text("# IR dump naming\n")
    return root


def test_stamped_rlc_attributes_are_removed_in_any_position():
    base = 'module attributes {"a" = 1 : i32, "b" = 2 : i32} {'
    middle = 'module attributes {"a" = 1 : i32, "ttg.rlc-enhance" = 1 : i32, "ttg.rlc-mask" = -7 : i32, "b" = 2 : i32} {'
    first = 'module attributes {"ttg.rlc-enhance" = 1 : i32, "a" = 1 : i32, "b" = 2 : i32} {'
    last = 'module attributes {"a" = 1 : i32, "b" = 2 : i32, "ttg.rlc-x" = 0 : i32} {'
    for text in (middle, first, last):
        assert fp.strip_switch_stamps(text) == base
    # Other attributes and ops are untouched.
    assert fp.strip_switch_stamps(MODULE % ("", CVT)) == MODULE % ("", CVT)


def test_extra_strip_prefixes_from_env(monkeypatch):
    monkeypatch.setenv(fp.STRIP_ENV, "ttg.myswitch-, ")
    assert fp.strip_prefixes() == ["ttg.rlc-", "ttg.myswitch-"]
    text = '{"a" = 1 : i32, "ttg.myswitch-on" = true}'
    assert fp.strip_switch_stamps(text) == '{"a" = 1 : i32}'


def test_fingerprint_ignores_stamps_but_not_code(tmp_path):
    a = make_run(tmp_path / "a", {"1024/k/w4s3.ttgir": MODULE % ("", "")})
    b = make_run(tmp_path / "b", {"1024/k/w4s3.ttgir": MODULE % ('"ttg.rlc-enhance" = 1 : i32, ', "")})
    c = make_run(tmp_path / "c", {"1024/k/w4s3.ttgir": MODULE % ("", CVT)})
    assert fp.fingerprint(a) == fp.fingerprint(b)
    assert fp.fingerprint(a) != fp.fingerprint(c)
    assert fp.compare(a, b)["exit_code"] == fp.EXIT_OK
    assert fp.compare(a, c)["exit_code"] == fp.EXIT_DIFFERENT


LOC = ('#loc = loc("%s/pointwise_dynamic_31b7_relu_forward_kernel_rank_1.py":61:0)\n'
       '#loc3 = loc("%s/pointwise_dynamic_31b7_relu_forward_kernel_rank_1.py":74:25)\n')


def test_private_cache_paths_in_source_locations_do_not_count(tmp_path):
    # Seen on the H200: an A/A screen with per-run FlagGems caches called relu IR_CHANGED
    # because every loc() carried /tmp/r1/.flaggems_cache/... vs /tmp/r2/.flaggems_cache/...
    body = MODULE % ("", CVT)
    a = make_run(tmp_path / "a", {"64x64/k/w4s3.ttgir": LOC % (("/tmp/r1/.flaggems_cache/code_cache",) * 2) + body})
    b = make_run(tmp_path / "b", {"64x64/k/w4s3.ttgir": LOC % (("/tmp/r2/.flaggems_cache/code_cache",) * 2) + body})
    assert fp.compare(a, b)["status"] == "same"
    # A different generated source (its file name carries the content hash) still counts,
    # and so does a different line of the same file.
    c = make_run(tmp_path / "c", {"64x64/k/w4s3.ttgir": (LOC % ("/x", "/x")).replace("31b7", "99aa") + body})
    d = make_run(tmp_path / "d", {"64x64/k/w4s3.ttgir": (LOC % ("/x", "/x")).replace(":74:25", ":75:25") + body})
    assert fp.compare(a, c)["status"] == "different"
    assert fp.compare(a, d)["status"] == "different"


def test_normalize_paths_covers_llvm_and_ptx_file_names():
    assert fp.normalize_paths('!DIFile(filename: "/a/b/x.py", directory: "/tmp/r1/code_cache")') \
        == '!DIFile(filename: "x.py", directory: "code_cache")'
    assert fp.normalize_paths('.file 1 "/tmp/r2/x.py"') == '.file 1 "x.py"'
    # A writer's process id in a generated file's name does not count; what else the name
    # says (rank, key, content hash) does.
    pid = '#loc = loc("/c/code_cache/index_add_rank_2_pid_%s.py":12:0)'
    assert fp.normalize_paths(pid % "8123") == fp.normalize_paths(pid % "77") \
        == '#loc = loc("index_add_rank_2_pid_N.py":12:0)'
    assert fp.normalize_paths(pid.replace("rank_2", "rank_3") % "8123") != fp.normalize_paths(pid % "8123")
    assert fp.normalize_paths('"/c/x_pid_12b.py"') == '"x_pid_12b.py"'     # not a pid: left alone
    # LLVM's DIFile and PTX's .file name the file apart from its directory (the H100 A/A of
    # index_add_ read IR_CHANGED@llir with TTGIR equal): the relative name loses its pid too.
    difile = '!DIFile(filename: "index_add_rank_0_pid_%s.py", directory: "/r/code_cache")'
    assert fp.normalize_paths(difile % "8123") == fp.normalize_paths(difile % "9") \
        == '!DIFile(filename: "index_add_rank_0_pid_N.py", directory: "code_cache")'
    assert fp.normalize_paths('.file 1 "/r/c" "g_pid_41.py"') == '.file 1 "c" "g_pid_N.py"'
    assert fp.normalize_paths('call @f_pid_41.py "x"') == 'call @f_pid_41.py "x"'   # unquoted: kept
    # NVPTX ends every .loc with the DIFile name in a comment, unquoted (recorded from Triton's
    # NVPTX output for a kernel in a generated `..._pid_<n>.py`): an H100 A/A of index_add_
    # read IR_CHANGED@ptx from these comments alone, its binary equal.
    loc = "\t.loc\t1 5 0                           // index_add_rank_0_pid_%s.py:5:0"
    assert fp.normalize_paths(loc % "111") == fp.normalize_paths(loc % "22222") \
        == "\t.loc\t1 5 0                           // index_add_rank_0_pid_N.py:5:0"
    assert fp.normalize_paths("// /tmp/r1/code_cache/g_pid_7.py:3:1") == "// g_pid_N.py:3:1"
    assert fp.normalize_paths("// index_add_rank_1_pid_7.py:5:0") != fp.normalize_paths("// index_add_rank_0_pid_7.py:5:0")
    assert fp.normalize_paths("mov.u32 %r1_pid_7.py, 0;") == "mov.u32 %r1_pid_7.py, 0;"   # code: kept
    # AMDGCN (recorded from Triton's gfx942 output, same kernel): `;` comments, same rule.
    amd = "\t.loc\t1 5 0 prologue_end              ; index_add_rank_0_pid_%s.py:5:0"
    assert fp.normalize_paths(amd % "111") == fp.normalize_paths(amd % "22222") \
        == "\t.loc\t1 5 0 prologue_end              ; index_add_rank_0_pid_N.py:5:0"
    # Relative names and non-path strings are left alone.
    assert fp.normalize_paths('"ttg.target" = "cuda:90", "rel/x.py"') == '"ttg.target" = "cuda:90", "rel/x.py"'


def test_fingerprint_depends_on_relative_paths_only_not_on_index(tmp_path):
    a = make_run(tmp_path / "a", {"1024/k/w4s3.ttgir": "x"}, [("1024", "k", "w4s3.ttgir", 5)])
    b = make_run(tmp_path / "b", {"1024/k/w4s3.ttgir": "x"}, [("1024", "k", "w4s3.ttgir", 999)])
    c = make_run(tmp_path / "c", {"2048/k/w4s3.ttgir": "x"})
    assert fp.fingerprint(a) == fp.fingerprint(b)
    assert fp.fingerprint(a) != fp.fingerprint(c)


def test_zero_ttgir_is_no_ir_not_identical(tmp_path):
    # Two runs that compiled nothing still have identical index.tsv and naming.md.
    a = make_run(tmp_path / "a", {})
    b = make_run(tmp_path / "b", {})
    with pytest.raises(fp.NoIRError):
        fp.fingerprint(a)
    assert fp.compare(a, b)["status"] == "no_ir"
    assert fp.compare(a, b)["exit_code"] == fp.EXIT_NO_IR
    (tmp_path / "bare").mkdir()
    with pytest.raises(fp.NoIRError):
        fp.fingerprint(tmp_path / "bare")
    with pytest.raises(fp.RunDirError):
        fp.fingerprint(tmp_path / "missing")


def test_other_levels_fingerprint_separately(tmp_path):
    a = make_run(tmp_path / "a", {"s/k/w4s3.ttgir": "x", "s/k/w4s3.llir": "define void @k() {}"})
    b = make_run(tmp_path / "b", {"s/k/w4s3.ttgir": "x", "s/k/w4s3.llir": "define void @k() { ret void }"})
    assert fp.fingerprint(a) == fp.fingerprint(b)
    assert fp.fingerprint(a, "llir") != fp.fingerprint(b, "llir")


def test_convert_count_scopes_out_input_construction(tmp_path):
    run = make_run(tmp_path / "r", {
        "1048576/randn_kernel/w16s3.ttgir": MODULE % ("", CVT * 4),
        "1048576/gelu_backward_kernel/w4s3.ttgir": MODULE % ("", ""),
        "1024x1024/sweep/w4s3.ttgir": MODULE % ("", CVT * 3),
    }, [
        ("1048576", "randn_kernel", "w16s3.ttgir", 1),
        ("1048576", "gelu_backward_kernel", "w4s3.ttgir", 3795),
        ("1024x1024", "sweep", "w4s3.ttgir", 280),
        ("-", "loser", "(compiled, never launched)", 0),
    ])
    out = fp.convert_count(run)
    assert out["total_convert_count"] == 7
    assert out["measured_convert_count"] == 3
    assert out["scope_complete"] is True
    assert [e["file"] for e in out["excluded_unmeasured"]] == ["1048576/randn_kernel/w16s3.ttgir"]
    # A higher floor excludes more; floor 0 keeps everything that launched.
    assert fp.convert_count(run, launch_floor=300)["measured_convert_count"] == 0
    assert fp.convert_count(run, launch_floor=0)["measured_convert_count"] == 7


def test_convert_count_flags_unindexed_and_missing_index(tmp_path):
    run = make_run(tmp_path / "r", {"s/m/w4s3.ttgir": CVT * 2, "s/stray/w4s3.ttgir": CVT},
                   [("s", "m", "w4s3.ttgir", 140)])
    out = fp.convert_count(run)
    assert out["measured_convert_count"] == 3
    assert out["unindexed_files"] == ["s/stray/w4s3.ttgir"]
    assert out["scope_complete"] is False
    (run / "ttgir" / "index.tsv").unlink()
    out = fp.convert_count(run)
    assert out["index_found"] is False and out["scope_complete"] is False
    assert out["measured_convert_count"] == 3


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "zl.ir.fingerprint", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_exit_codes(tmp_path):
    a = make_run(tmp_path / "a", {"s/k/w4s3.ttgir": "x"})
    b = make_run(tmp_path / "b", {"s/k/w4s3.ttgir": "y"})
    empty = make_run(tmp_path / "e", {})
    r = _cli(a)
    assert r.returncode == 0 and r.stdout.strip() == fp.fingerprint(a)
    assert _cli(empty).returncode == 1
    assert _cli("compare", a, a).returncode == 0
    assert _cli("compare", a, b).returncode == 10
    r = _cli("compare", a, empty)
    assert r.returncode == 1 and "no comparable IR" in r.stderr
    assert _cli(tmp_path / "nope").returncode == 2
    assert _cli("compare", a).returncode == 2
    r = _cli("--converts", a, "--launch-floor", "0")
    assert r.returncode == 0 and json.loads(r.stdout)["ttgir_files"] == 1
    assert _cli("--converts", empty).returncode == 1


def test_shell_wrapper_uses_the_same_rule(tmp_path):
    a = make_run(tmp_path / "a", {"s/k/w4s3.ttgir": MODULE % ("", "")})
    b = make_run(tmp_path / "b", {"s/k/w4s3.ttgir": MODULE % ('"ttg.rlc-enhance" = 1 : i32, ', CVT)})
    empty = make_run(tmp_path / "e", {})
    script = (f'source "{REPO}/zl/sh/ir_fingerprint.sh"; '
              f'fa=$(ir_fingerprint "{a}"); echo "fa=$fa"; '
              f'ir_fingerprint "{empty}" >/dev/null 2>&1; echo "empty=$?"; '
              f'ir_compare "{a}" "{b}" >/dev/null; echo "cmp=$?"; '
              f'ir_compare "{a}" "{a}" >/dev/null; echo "same=$?"; '
              f'ir_converts "{b}" 0 | python3 -c "import json,sys; print(\'cvt=\', json.load(sys.stdin)[\'total_convert_count\'])"')
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent), "ZL_PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    assert f"fa={fp.fingerprint(a)}" in r.stdout
    assert "empty=1" in r.stdout and "cmp=10" in r.stdout and "same=0" in r.stdout
    assert "cvt= 1" in r.stdout
