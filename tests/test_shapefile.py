"""zl.shapefile: a SHAPE_FILE is bounded, typed and sized before a run starts.

Each attack here once got past preflight: a recursive alias (RecursionError), a non-UTF-8
byte (UnicodeDecodeError), an alias bomb (preflight hung), a million shapes (minutes),
`[1000000000, 1000000000]`, a dimension above 2^63 and `1O24` (failed inside pytest).
Unit tests on the loader; tests/test_run_pytest.py runs the same files through preflight.
"""
import os
import stat
import time
import types

import pytest

from zl import shapefile
from zl.shapefile import ShapeFileError, validate_shape_file

H200 = (143771 * 2 ** 20, "device 0's memory")


def _file(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def alias_bomb(levels=10, width=10):
    """`a_k: [*a_{k-1}] x width`: ~11 kB of text standing for width^levels shapes."""
    lines = ["a0: &a0 [4, 64]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"relu:\n  shapes: [*a{levels - 1}]")
    return "\n".join(lines) + "\n"


ATTACKS = {
    "recursive alias": ("relu: &a\n  shapes: [*a]\n", "refers to a node that contains it"),
    "recursive sequence": ("relu:\n  shapes: &s [[4, 64], *s]\n", "alias *s at line 2 refers to a node"),
    "not utf-8": (b"relu:\n  shapes:\n    - [4, 64]  # \xff\n", "is not UTF-8 text (byte 0xff at offset"),
    "alias bomb": (alias_bomb(), f"more than {shapefile.MAX_NODES} yaml nodes"),
    "deep nesting": ("relu:\n  shapes:\n    - " + "[" * 5000 + "1" + "]" * 5000 + "\n",
                     f"nested deeper than {shapefile.MAX_DEPTH} levels"),
    "bad timestamp": ("relu:\n  shapes:\n    - [4, 64]\n  when: 2020-13-45\n", "a value cannot be read"),
    "two documents": ("relu: {shapes: [[4]]}\n---\nrelu: {shapes: [[8]]}\n", "is not valid yaml"),
    "over int64": (f"relu:\n  shapes:\n    - [{2 ** 63}, 4]\n", f"{2 ** 63}, which does not fit int64"),
    "typo O for 0": ("relu:\n  shapes:\n    - [1O24, 4]\n", "'1O24', a word that reads like a mistyped number"),
    "leading O": ("relu:\n  shapes:\n    - [O24, 4]\n", "'O24', a word that reads like a mistyped number"),
    "yaml 1.1 exponent": ("relu:\n  shapes:\n    - [1e6, 4]\n", "'1e6', a word that reads like"),
    "cannot fit": ("relu:\n  shapes:\n    - [4, 64]\n    - [1000000000, 1000000000]\n",
                   "shape [1000000000, 1000000000] needs a tensor of at least 1000000000000000000 elements"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_is_a_named_shape_file_error_and_quick(tmp_path, name):
    text, needle = ATTACKS[name]
    path = _file(tmp_path, text)
    t0 = time.perf_counter()
    with pytest.raises(ShapeFileError) as err:
        validate_shape_file(path, "relu", ["float16"], H200)
    assert time.perf_counter() - t0 < 5
    assert needle in str(err.value) and str(err.value).startswith(path)


def test_size_is_bounded_before_parsing(tmp_path):
    """A million shapes took minutes to parse; the byte bound refuses it without reading it all."""
    body = "relu:\n  shapes:\n" + "    - [4, 64]\n" * 1_000_000
    path = _file(tmp_path, body)
    t0 = time.perf_counter()
    with pytest.raises(ShapeFileError, match=f"larger than {shapefile.MAX_BYTES} bytes"):
        validate_shape_file(path, "relu", ["float16"], H200)
    assert time.perf_counter() - t0 < 1


def test_limits_hold_at_the_boundary(tmp_path, monkeypatch):
    """Exactly at each limit passes; one beyond fails (the limits are what they say)."""
    monkeypatch.setattr(shapefile, "MAX_BYTES", 64)
    ok = "relu:\n  shapes:\n    - [4, 64]\n"
    ok += "#" * (64 - len(ok) - 1) + "\n"
    assert len(ok) == 64 and validate_shape_file(_file(tmp_path, ok), "relu") is None
    with pytest.raises(ShapeFileError, match="larger than 64 bytes"):
        validate_shape_file(_file(tmp_path, ok + "\n", "big.yaml"), "relu")
    monkeypatch.setattr(shapefile, "MAX_BYTES", 1 << 20)

    monkeypatch.setattr(shapefile, "MAX_ALIASES", 2)
    two = "x: &x [4, 64]\nrelu:\n  shapes: [*x, *x]\n"
    assert validate_shape_file(_file(tmp_path, two, "a2.yaml"), "relu") is None
    with pytest.raises(ShapeFileError, match="more than 2 aliases"):
        validate_shape_file(_file(tmp_path, two.replace("[*x, *x]", "[*x, *x, *x]"), "a3.yaml"), "relu")
    monkeypatch.setattr(shapefile, "MAX_ALIASES", 1000)

    # root, relu:, its map, shapes:, the list, two shapes x 3 nodes = 11
    nodes = "relu:\n  shapes: [[4, 64], [8, 64]]\n"
    monkeypatch.setattr(shapefile, "MAX_NODES", 11)
    assert validate_shape_file(_file(tmp_path, nodes, "n.yaml"), "relu") is None
    monkeypatch.setattr(shapefile, "MAX_NODES", 10)
    with pytest.raises(ShapeFileError, match="more than 10 yaml nodes"):
        validate_shape_file(_file(tmp_path, nodes, "n.yaml"), "relu")
    # an alias counts as everything it stands for: root, s:, the anchored shape (3), relu:,
    # its map, shapes:, the list, and 3 aliases x 3 nodes = 18
    monkeypatch.setattr(shapefile, "MAX_NODES", 18)
    aliased = "s: &s [4, 64]\nrelu:\n  shapes: [*s, *s, *s]\n"
    assert validate_shape_file(_file(tmp_path, aliased, "al.yaml"), "relu") is None
    monkeypatch.setattr(shapefile, "MAX_NODES", 17)
    with pytest.raises(ShapeFileError, match="more than 17 yaml nodes"):
        validate_shape_file(_file(tmp_path, aliased, "al.yaml"), "relu")


@pytest.mark.parametrize("depth,ok", [(shapefile.MAX_DEPTH, True), (shapefile.MAX_DEPTH + 1, False)])
def test_nesting_depth_boundary(tmp_path, depth, ok):
    # the two mappings, the list of shapes and the scalar 4 take 4 of the depth
    inner = "[" * (depth - 4) + "4" + "]" * (depth - 4)
    path = _file(tmp_path, f"relu:\n  shapes: [{inner}]\n")
    if ok:
        assert validate_shape_file(path, "relu") is None
    else:
        with pytest.raises(ShapeFileError, match="nested deeper than"):
            validate_shape_file(path, "relu")


def test_ordinary_anchors_and_merge_keys_still_load(tmp_path):
    """upstream's core_shapes.yaml style: `<<: *anchor` shared by several operators."""
    text = ("base: &base\n  shapes:\n    - [64]\n    - [1024, 4096]\n  shape_desc: M\n"
            "relu:\n  <<: *base\nexp:\n  <<: *base\n")
    assert validate_shape_file(_file(tmp_path, text), "relu", ["float16"], H200) is None


@pytest.mark.parametrize("word", ["valid", "same", "reflect", "nearest", "float16", "none"])
def test_parameter_words_still_pass(word):
    assert shapefile.shape_problem([2, 4, 24, 24, word]) is None


@pytest.mark.parametrize("word", ["1O24", "O24", "1e6", "1.5x", "-3", "lO", "+4"])
def test_number_like_words_are_refused(word):
    assert "mistyped number" in shapefile.shape_problem([4, word])


def test_int64_boundary():
    assert shapefile.shape_problem([2 ** 63 - 1]) is None
    assert "does not fit int64" in shapefile.shape_problem([2 ** 63])


@pytest.mark.parametrize("shape,elements", [
    ([4096, 4096], 4096 * 4096),                         # a tensor shape
    ([1073741824], 1073741824),                          # one dimension
    ([16, 4096, 4096, 4096], 4096 * 4096),               # B, M, N, K: the two largest meet
    ([64, 32, 210, 210, 64, 5, 5, 2, 1, 1], 210 * 210),  # conv parameters
    ([[268435456], [[65536]], [65536], False], 268435456),  # nested lists are tensor shapes
    ([[512, 512, 512], [[2, 128]]], 512 ** 3),
])
def test_largest_tensor_lower_bound(shape, elements):
    assert shapefile.largest_tensor_elements(shape) == elements


def test_memory_bound_at_its_boundary_and_uses_the_smallest_requested_dtype():
    memory = (2 * 4096 * 4096, "device 0's memory")
    assert shapefile.memory_problem([4096, 4096], ["float16"], memory) is None
    over = shapefile.memory_problem([4096, 4097], ["float16"], memory)
    assert over.startswith(f"needs a tensor of at least {4096 * 4097} elements x 2 B (float16)")
    assert "more than device 0's memory (32 MiB)" in over
    # float32 alone does not fit; with float16 requested too, the smaller element decides
    assert shapefile.memory_problem([4096, 4096], ["float32"], memory) is not None
    assert shapefile.memory_problem([4096, 4096], ["float32", "float16"], memory) is None
    # an empty DTYPES (the benchmark's own) or an unknown word counts 1 byte: never over-refuse
    assert shapefile.memory_problem([4096, 8192], [], memory) is None
    assert shapefile.memory_problem([4096, 8192], ["float32", "mystery"], memory) is None


def test_upstream_sized_shapes_fit_an_h200(tmp_path):
    text = ("BlasBenchmark:\n  shapes:\n    - [16, 4096, 4096, 4096]\n"
            "exponential:\n  shapes:\n    - [1073741824]\n    - [1024, 1024, 1024]\n")
    assert validate_shape_file(_file(tmp_path, text), "exponential", ["float32"], H200) is None


def _tool(tmp_path, body):
    tool = tmp_path / "fake-smi"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    from zl.backends import get_backend
    cuda = get_backend("cuda")
    return types.SimpleNamespace(memory_query_argv=(str(tool), "--total", "-i", "{dev}"),
                                 inherited_devices=cuda.inherited_devices)


def test_device_memory_reads_the_pinned_card_else_the_largest(tmp_path):
    # two cards (80 GiB, 140 GiB), as nvidia-smi lists them; with -i only the one asked for
    backend = _tool(tmp_path, 'if [ "$2" = "-i" ]; then [ "$3" = 1 ] && echo 143771 || echo 81920; '
                              'else echo 81920; echo 143771; fi\n')
    assert shapefile.device_memory(backend, {"CUDA_VISIBLE_DEVICES": "1"}) == (143771 * 2 ** 20, "device 1's memory")
    assert shapefile.device_memory(backend, {"ZL_DEVICE": "0"}) == (81920 * 2 ** 20, "device 0's memory")
    # the visibility variable wins over ZL_DEVICE, as the run's pinning does
    assert shapefile.device_memory(backend, {"CUDA_VISIBLE_DEVICES": "1,0", "ZL_DEVICE": "0"})[0] == 143771 * 2 ** 20
    assert shapefile.device_memory(backend, {}) == (143771 * 2 ** 20, "the largest device's memory")


def test_device_memory_falls_back_to_the_host(tmp_path):
    host = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "the host's memory")
    assert shapefile.device_memory(_tool(tmp_path, "exit 9\n"), {}) == host
    assert shapefile.device_memory(_tool(tmp_path, "echo 'No devices were found'\n"), {}) == host
    assert shapefile.device_memory(types.SimpleNamespace(memory_query_argv=("/nonexistent/smi",)), {}) == host
    assert shapefile.device_memory(types.SimpleNamespace(), {}) == host


def test_cuda_backend_queries_total_memory_per_card():
    from zl.backends import get_backend
    argv = get_backend("cuda").memory_query_argv
    assert argv[0] == "nvidia-smi" and "--query-gpu=memory.total" in argv and "{dev}" in argv
