"""zl.runlog.caliber beyond the field list: the record link between the sides of an A/B, a
replay that replayed nothing, configs outside the tuner's candidates, hardware fields and
an unreadable device_share. Each refusal is checked by its reason and by batch_summary's
exit 4; the autotune plugin's side of the link is tested in test_autotune_record_plugin.py."""

import json
from pathlib import Path

import pytest

import batch_summary as bs
from zl.runlog import caliber

BASE = {"backend": "cuda", "device": "0", "timer": "cuda_graph", "bench_level": "core",
        "shape_mode": "inline", "tuner_cache": "isolated", "direct_repeat": 1}
ROW = ("{:<10}{:>20.6f}{:>20.6f}{:>20.3f}" + " " * 10 + "[torch.Size([1024])]")
HEADER = (f"{'Status':<10} {'Torch Latency (ms)':>20} {'Gems Latency (ms)':>20} "
          f"{'Gems Speedup':>20} {'Size Detail':>20}")
DA, DC, DE = ("sha256:" + c * 64 for c in "ace")


def run(d: Path, latency: float = 0.01, **ident) -> Path:
    """A run directory with one relu row and exactly the identity given (plus BASE)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.log").write_text(
        "collected 1 item\n"
        "Operator: relu  Performance Test (dtype=torch.float16, mode=kernel,level=core)\n"
        f"{HEADER}\n{'-' * 95}\n{ROW.format('SUCCESS', 0.01, latency, 0.01 / latency)}\n"
        "====== 1 passed in 1.00s ======\n")
    (d / "run_identity.json").write_text(json.dumps({**BASE, **ident}))
    return d


def recorded(d: Path, run_id: str, digest: str, **ident) -> Path:
    return run(d, autotune_mode="record", run_id=run_id, autotune_record_digest=digest, **ident)


def replayed(d: Path, source: Path, digest: str = "", **ident) -> Path:
    """A replay of `source` as the plugin records it (the digest it read: `digest`, else the
    source's own)."""
    src = json.loads((source / "run_identity.json").read_text())
    link = {"autotune_mode": "replay", "replay_source_dir": str(source),
            "replay_source_run_id": src.get("run_id"),
            "replay_record_digest": digest or src.get("autotune_record_digest"),
            "replay_source_record_digest": src.get("autotune_record_digest")}
    return run(d, latency=0.009, **{**link, **ident})


def ab(capsys, a: Path, b: Path, *extra: str):
    capsys.readouterr()
    rc = bs.main(["--ab", str(a), str(b), "--label", "relu", *extra])
    return rc, capsys.readouterr().out


def link_problems(a: Path, b: Path):
    return [p for p in caliber.complaints([("before", a), ("after", b)]) if "autotune record link" in p]


# ------------------------------------------------------------------ the record link

def test_replay_paired_with_the_run_it_replayed_is_accepted(tmp_path, capsys):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = replayed(tmp_path / "B", a)
    assert caliber.complaints([("before", a), ("after", b)]) == []
    rc, out = ab(capsys, a, b)
    assert rc == 0 and "1 paired rows" in out, out


def test_replay_paired_with_another_record_run_is_refused(tmp_path, capsys):
    """`--ab C B` where B replayed A: B's timings are of A's configs, C's of its own."""
    a = recorded(tmp_path / "A", "a" * 32, DA)
    c = recorded(tmp_path / "C", "c" * 32, DC)
    b = replayed(tmp_path / "B", a)
    (problem,) = link_problems(c, b)
    assert problem.startswith(f"autotune record link: after replayed record {DA[:19]} of run "
                              f"{'a' * 12} ({a}), but before recorded record {DC[:19]} of run "
                              f"{'c' * 12}")
    rc, out = ab(capsys, c, b)
    assert rc == 4 and "!!! [caliber] relu: autotune record link: after replayed" in out
    assert "paired rows" not in out
    rc, out = ab(capsys, c, b, "--allow-caliber-mismatch")
    assert rc == 0 and "warning [caliber] relu: autotune record link" in out


def test_same_configs_from_another_run_are_still_another_run(tmp_path):
    """C recorded the very same record as A: B still did not replay C (its run id says so)."""
    a = recorded(tmp_path / "A", "a" * 32, DA)
    c = recorded(tmp_path / "C", "c" * 32, DA)
    b = replayed(tmp_path / "B", a)
    assert len(link_problems(c, b)) == 1


def test_side_a_recorded_again_after_b_replayed_it_is_refused(tmp_path):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = replayed(tmp_path / "B", a)
    recorded(tmp_path / "A", "f" * 32, DE)        # A's directory holds a new recording now
    assert len(link_problems(a, b)) == 1
    recorded(tmp_path / "A", "a" * 32, DE)        # the same run's record rewritten in place
    (problem,) = link_problems(a, b)
    assert f"before recorded record {DE[:19]}" in problem


def test_replay_of_an_edited_record_is_refused_even_without_its_source(tmp_path):
    """The replay read digest DE while its source's identity named DA: the record was
    changed after its run wrote it. Two such replays agree with each other, but they are
    refused on their own evidence."""
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b1 = replayed(tmp_path / "B1", a, digest=DE)
    b2 = replayed(tmp_path / "B2", a, digest=DE)
    problems = caliber.complaints([("r2_A", b1), ("r2_B", b2)])
    assert problems == [
        f"autotune record link: {n} replayed record {DE[:19]}, but its source run {'a' * 12} "
        f"wrote {DA[:19]}: the record was edited or rewritten after that run" for n in ("r2_A", "r2_B")]


def test_rounds_whose_b_replayed_an_edited_record_are_refused(tmp_path, capsys):
    root = tmp_path / "relu"
    a1 = recorded(root / "r1_A", "a" * 32, DA)
    for k in (1, 2, 3):
        for side in "AB":
            if (k, side) != (1, "A"):
                replayed(root / f"r{k}_{side}", a1, digest=DE if (k, side) == (3, "B") else "")
    capsys.readouterr()
    rc = bs.main(["--ab-rounds", str(root), "--label", "relu"])
    out = capsys.readouterr().out
    assert rc == 4, out
    assert f"!!! [caliber] relu: autotune record link: r3_B replayed record {DE[:19]}" in out
    assert "autotune record link: r2_B" not in out and "rounds x" not in out


def test_runs_without_the_link_fields_cannot_show_the_link(tmp_path, capsys):
    """Runs written before the fields existed: refused, saying why; overridable."""
    a = run(tmp_path / "A", autotune_mode="record")
    b = run(tmp_path / "B", latency=0.009, autotune_mode="replay")
    problems = caliber.complaints([("before", a), ("after", b)])
    assert problems == ["autotune record link cannot be verified: before, after lack "
                        "run_id/autotune_record_digest (record) or replay_source_run_id/"
                        "replay_record_digest (replay) in run_identity.json (runs written before "
                        "zl_bench recorded them): nothing shows side B replayed side A's record"]
    rc, out = ab(capsys, a, b)
    assert rc == 4
    rc, out = ab(capsys, a, b, "--allow-caliber-mismatch")
    assert rc == 0 and "1 paired rows" in out
    # a new replay of an old record run: neither side can name the record (the source had none)
    assert "cannot be verified: before, after lack" in link_problems(a, replayed(tmp_path / "B2", a))[0]
    # an old replay of a new record run: the replay side cannot
    a2 = recorded(tmp_path / "A2", "a" * 32, DA)
    assert "cannot be verified: after lack" in link_problems(a2, b)[0]


@pytest.mark.parametrize("mode", ["uncontrolled", "off", None])
def test_a_run_that_tuned_live_without_a_record_pairs_with_nothing(tmp_path, mode):
    """uncontrolled / off / no mode: its configs were tuned live. Against a replay the sides
    ran different configs; against a record run nothing was pinned at all."""
    a = recorded(tmp_path / "A", "a" * 32, DA)
    u = run(tmp_path / "U", **({"autotune_mode": mode} if mode else {}))
    b = replayed(tmp_path / "B", a)
    assert link_problems(u, b) == [
        f"autotune record link: before={mode or '<missing>'} ran no recorded configs (tuned live) "
        "while the other side replayed a record: the sides did not run the same configs"]
    (problem,) = caliber.complaints([("before", a), ("after", u)])
    assert problem.startswith("no run replayed recorded autotune configs")


# ------------------------------------------------------------------ a replay that replayed nothing

@pytest.mark.parametrize("ident,refused", [
    ({"autotune_mode": "replay_fallback", "replay_fallback_scope": "keys",
      "replay_replayed_keys": 0, "replay_fallback_keys": 3}, True),     # written before the plugin said `all`
    ({"autotune_mode": "replay_fallback", "replay_fallback_scope": "all",
      "replay_fallback_reason": "no_key_replayed", "replay_replayed_keys": 0,
      "replay_fallback_keys": 3}, True),
    ({"autotune_mode": "replay_fallback", "replay_fallback_scope": "keys",
      "replay_replayed_keys": 1, "replay_fallback_keys": 3}, False),    # partial: listed per key
    ({"autotune_mode": "replay", "replay_replayed_keys": 0, "replay_fallback_keys": 0}, False),  # nothing autotuned
])
def test_a_replay_whose_every_key_fell_back_is_record_vs_record(tmp_path, ident, refused):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = replayed(tmp_path / "B", a, **ident)
    problems = caliber.complaints([("before", a), ("after", b)])
    if refused:
        assert len(problems) == 1 and "this is record vs record" in problems[0]
        assert problems[0].startswith("after replayed no recorded config (replay_replayed_keys=0, "
                                      "3 key(s) tuned live")
    else:
        assert problems == []


def test_a_whole_run_fallback_names_its_reason(tmp_path):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = run(tmp_path / "B", autotune_mode="replay_fallback", replay_fallback_scope="all",
            replay_fallback_reason="backend_mismatch")
    assert caliber.complaints([("before", a), ("after", b)]) == [
        "after could not use the recorded autotune configs (autotune_mode=replay_fallback: "
        "backend_mismatch) and tuned live: this is record vs record; see the "
        "AUTOTUNE_REPLAY_FALLBACK lines in its run.log"]


# ------------------------------------------------------------------ configs outside the candidates

def test_configs_outside_the_tuners_candidates_are_listed_per_key(tmp_path, capsys):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    foreign = [{"kernel": "m.k", "key": "128,fp16", "reason": "not_a_candidate"},
               {"kernel": "m.k", "key": "256,fp16", "reason": "unknown_kwargs"}]
    b = replayed(tmp_path / "B", a, replay_foreign_configs=foreign)
    assert caliber.complaints([("before", a), ("after", b)]) == []
    (hazard,) = caliber.hazards([("before", a), ("after", b)])
    assert hazard.startswith("after replayed 2 config(s) its tuner does not list "
                             "(AUTOTUNE_REPLAY_FOREIGN_CONFIG): kernel=m.k key=128,fp16 "
                             "reason=not_a_candidate; kernel=m.k key=256,fp16 reason=unknown_kwargs")
    rc, out = ab(capsys, a, b, "--json", str(tmp_path / "ab.json"))
    assert rc == 0 and f"warning [caliber] relu: {hazard}" in out
    assert json.loads((tmp_path / "ab.json").read_text())["caliber_hazards"] == [hazard]


# ------------------------------------------------------------------ hardware and device_share

@pytest.mark.parametrize("b_device,differs", [
    ({"device_name": "cpu", "device_arch": "triton-interpreter"}, ["device_name", "device_arch"]),
    ({"device_name": "NVIDIA H100 80GB HBM3", "device_arch": "9.0"}, ["device_name"]),
    ({"device_name": "NVIDIA H200"}, ["device_arch"]),          # present on one side only
    ({"device_name": "NVIDIA H200", "device_arch": "9.0"}, []),
])
def test_device_name_and_arch_are_caliber_fields(tmp_path, b_device, differs):
    a = recorded(tmp_path / "A", "a" * 32, DA, device_name="NVIDIA H200", device_arch="9.0")
    b = replayed(tmp_path / "B", a, **b_device)
    got = [p.split(" differs")[0] for p in caliber.complaints([("before", a), ("after", b)])]
    assert got == differs


def test_runs_without_device_name_and_arch_on_both_sides_still_compare(tmp_path):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    assert caliber.complaints([("before", a), ("after", replayed(tmp_path / "B", a))]) == []


def test_a_side_a_from_before_the_collector_rules_is_refused_beside_a_current_side_b(tmp_path, capsys):
    """A side A written before runs stated `ir_collection` may hold the autotuner's post-sweep
    reset as the operator's code, which the replay never runs: paired with a current side B
    the IR verdict would read a change the switch never made."""
    from zl.ir import RULES
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = replayed(tmp_path / "B", a, ir_collection=RULES)
    assert caliber.complaints([("before", a), ("after", b)]) == [
        f"ir_collection differs: before=<missing>, after={RULES}"]
    rc, out = ab(capsys, a, b)
    assert rc == 4 and "ir_collection differs" in out and "paired rows" not in out
    a2 = recorded(tmp_path / "A2", "c" * 32, DC, ir_collection=RULES)
    assert caliber.complaints([("before", a2), ("after", replayed(tmp_path / "B2", a2, ir_collection=RULES))]) == []


def test_a_pair_across_two_builds_is_reported_with_the_fields_that_differ(tmp_path, capsys):
    """Not refused (comparing two builds is a use), but never silent."""
    a = recorded(tmp_path / "A", "a" * 32, DA, triton_version="3.6.0", flaggems_commit="c1")
    b = replayed(tmp_path / "B", a, triton_version="3.6.0+flagtree", flaggems_commit="c1")
    assert caliber.complaints([("before", a), ("after", b)]) == []
    assert caliber.hazards([("before", a), ("after", b)]) == [
        "toolchain differs (triton_version before=3.6.0, after=3.6.0+flagtree): the delta is of the "
        "two builds, not of one switch alone"]
    rc, out = ab(capsys, a, b)
    assert rc == 0 and "warning [caliber] relu: toolchain differs (triton_version" in out
    c = replayed(tmp_path / "C", a, triton_version="3.6.0", flaggems_commit="c1")
    assert caliber.hazards([("before", a), ("after", c)]) == []


@pytest.mark.parametrize("b_state, refused", [("routed", True), ("not_live", False), ("absent", False)])
def test_an_mm_routed_around_the_cluster_kernel_is_refused_beside_one_that_was_not(tmp_path, b_state, refused):
    a = recorded(tmp_path / "A", "a" * 32, DA)
    b = replayed(tmp_path / "B", a, mm_cluster_fix=b_state)
    got = caliber.complaints([("before", a), ("after", b)])
    assert got == ([f"mm_cluster_fix differs: before=<missing>, after={b_state}"] if refused else [])


@pytest.mark.parametrize("share", ["two", "", "1.5"])
def test_an_unreadable_device_share_is_never_solo(tmp_path, share):
    """A device_share that does not read as an integer cannot show the device was not
    shared: refused even when both sides carry the same value."""
    a = recorded(tmp_path / "A", "a" * 32, DA, device_share=share)
    b = replayed(tmp_path / "B", a, device_share=share)
    problems = caliber.complaints([("before", a), ("after", b)])
    assert problems == [f"{n}: device shared with {share} concurrent measurements (device_share): "
                        "a functional check, not a timing" for n in ("before", "after")]
