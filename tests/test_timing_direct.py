"""zl.timing.direct: ZL_DIRECT_REPEAT's median of N upstream do_bench calls."""

from __future__ import annotations

import pytest

from zl.timing import direct


def sequence_bench(values):
    calls = []

    def bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        calls.append(dict(quantiles=quantiles, return_mode=return_mode, warmup=warmup, rep=rep))
        if quantiles is not None:
            return [9.0, 8.0, 7.0]
        if return_mode == "all":
            return [1.0, 2.0, 3.0]
        return values[(len(calls) - 1) % len(values)]

    return bench, calls


@pytest.mark.parametrize("repeat,expected,n_calls", [
    (1, 3.0, 1), (3, 2.0, 3), (5, 3.0, 5), (4, 2.5, 4),
])
def test_run_direct_takes_the_median_of_n_calls(repeat, expected, n_calls):
    bench, calls = sequence_bench([3.0, 1.0, 2.0, 9.0, 5.0])
    out = direct.run_direct(bench, lambda: None, warmup=7, rep=11, return_mode="median",
                            repeat=repeat)
    assert out == expected and len(calls) == n_calls
    assert all(c["warmup"] == 7 and c["rep"] == 11 and c["return_mode"] == "median"
               for c in calls)


@pytest.mark.parametrize("kw,expected", [
    ({"quantiles": (0.5, 0.2, 0.8)}, [9.0, 8.0, 7.0]),
    ({"return_mode": "all"}, [1.0, 2.0, 3.0]),
])
def test_run_direct_does_not_repeat_sequence_results(kw, expected):
    bench, calls = sequence_bench([3.0])
    assert direct.run_direct(bench, lambda: None, repeat=5, **kw) == expected
    assert len(calls) == 1


def test_repeated_do_bench_keeps_upstream_signature():
    bench, calls = sequence_bench([4.0, 6.0, 5.0])
    wrapped = direct.make_repeated_do_bench(bench, 3)
    assert wrapped(lambda: None, 1, 2, None, None, "median") == 5.0
    assert wrapped.zl_direct_repeat == 3 and len(calls) == 3


def test_repeated_do_bench_leaves_an_autotuners_call_to_one_upstream_call():
    """An autotuner's sweep (its module is triton.runtime.autotuner) is tuning, not a
    measurement: one upstream call per config, as upstream's run makes, not `repeat`."""
    bench, calls = sequence_bench([4.0, 6.0, 5.0])
    wrapped = direct.make_repeated_do_bench(bench, 3)
    scope = {"__name__": "triton.runtime.autotuner", "wrapped": wrapped}
    exec("def sweep(fn):\n    return wrapped(fn, quantiles=(0.5, 0.2, 0.8))\n", scope)
    assert scope["sweep"](lambda: None) == [9.0, 8.0, 7.0] and len(calls) == 1
    assert len(wrapped(lambda: None, return_mode="all")) == 3 and len(calls) == 2   # not repeated
    wrapped(lambda: None)
    assert len(calls) == 5                          # the benchmark's: repeated 3 times


def test_judge_do_bench_runs_the_benchmarks_call_once_and_returns_nan():
    import math
    from zl.timing.direct import make_judge_do_bench
    calls, syncs, upstream = [], [], []

    def original(fn, **kw):
        upstream.append(kw)
        return 0.5

    judge = make_judge_do_bench(original, lambda: syncs.append(1))
    assert math.isnan(judge(lambda: calls.append(1), warmup=7, rep=9))
    got = judge(lambda: calls.append(1), quantiles=(0.5, 0.2))
    assert len(got) == 2 and all(math.isnan(v) for v in got)
    assert [math.isnan(v) for v in judge(lambda: calls.append(1), return_mode="all")] == [True]
    assert len(calls) == 3 and len(syncs) == 3 and upstream == []
    # an autotuner's sweep (a call from triton.*) is Triton's own do_bench, untouched
    scope = {"__name__": "triton.runtime.autotuner", "judge": judge}
    exec("def sweep():\n    return judge(lambda: None, warmup=3, rep=4)\n", scope)
    assert scope["sweep"]() == 0.5 and upstream == [dict(warmup=3, rep=4, grad_to_none=None, quantiles=None,
                                                         return_mode="mean")]
