"""Unit tests for backends/: resolution, visibility, enumeration, identity, capture-error
classification, deny list, telemetry argv and parsers. No GPU needed: device probes run against a
fake vendor binary on PATH and a fake torch namespace."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import backends  # noqa: E402
from zl.backends import (  # noqa: E402
    ALIASES,
    ALL_VISIBILITY_KEYS,
    CAPTURE_VERDICTS,
    TELEMETRY_FIELDS,
    DeviceBackend,
    UnknownBackendError,
    get_backend,
    known_backends,
    normalize_backend_name,
    parse_device_list,
)

ALL = ("cuda", "musa", "rocm", "ascend")
# Upstream FlagGems facts the vendor names rest on, restated with where they come from.
UPSTREAM = yaml.safe_load((ROOT / "tests" / "fixtures" / "flaggems_vendors.yaml").read_text())


# --- resolution ---------------------------------------------------------------------------------

def test_known_backends_are_the_four_adapters():
    assert known_backends() == ("ascend", "cuda", "musa", "rocm")
    for name in ALL:
        assert get_backend(name).name == name


@pytest.mark.parametrize("alias,canonical", [
    ("nvidia", "cuda"), ("nv", "cuda"), ("amd", "rocm"), ("hip", "rocm"),
    ("npu", "ascend"), ("huawei", "ascend"), ("CUDA", "cuda"), ("  NVIDIA ", "cuda"),
    ("MUSA", "musa"),
])
def test_aliases_and_spelling(alias, canonical):
    assert get_backend(alias).name == canonical
    assert normalize_backend_name(alias) == canonical


def test_every_alias_targets_a_real_backend():
    assert set(ALIASES.values()) <= set(known_backends())


def test_same_object_each_time():
    assert get_backend("nvidia") is get_backend("cuda")


@pytest.mark.parametrize("bad", ["tpu", "not-a-backend", "cuda0", "mthreads", "gpu"])
def test_unknown_backend_fails_closed(bad):
    with pytest.raises(UnknownBackendError) as info:
        get_backend(bad)
    msg = str(info.value)
    assert repr(bad) in msg
    for name in known_backends():
        assert name in msg
    for alias in ALIASES:
        assert alias in msg
    assert isinstance(info.value, ValueError)


def test_none_reads_zl_backend(monkeypatch):
    monkeypatch.setenv("ZL_BACKEND", "musa")
    assert get_backend().name == "musa"
    monkeypatch.setenv("ZL_BACKEND", "huawei")
    assert get_backend(None).name == "ascend"
    # An explicit name wins over the environment.
    assert get_backend("rocm").name == "rocm"


@pytest.mark.parametrize("value", [None, ""])
def test_default_is_cuda(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("ZL_BACKEND", raising=False)
    else:
        monkeypatch.setenv("ZL_BACKEND", value)
    assert get_backend().name == "cuda"
    assert get_backend("").name == "cuda"


def test_unknown_zl_backend_names_the_variable(monkeypatch):
    monkeypatch.setenv("ZL_BACKEND", "tpu")
    with pytest.raises(UnknownBackendError, match="ZL_BACKEND 'tpu'"):
        get_backend()


# --- visibility ---------------------------------------------------------------------------------

def test_visibility_keys_are_all_registered():
    """apply_visibility can only clear keys it knows; a new backend must register its keys."""
    owned = set()
    for name in ALL:
        keys = get_backend(name).visibility_env_keys
        assert keys, name
        assert set(keys) <= set(ALL_VISIBILITY_KEYS), name
        owned |= set(keys)
    assert owned == set(ALL_VISIBILITY_KEYS)


@pytest.mark.parametrize("name", ALL)
def test_apply_visibility_clears_every_vendor_key(name):
    backend = get_backend(name)
    env = {key: "9" for key in ALL_VISIBILITY_KEYS}
    env["PATH"] = "/bin"
    out = backend.apply_visibility(env, "1")
    for key in ALL_VISIBILITY_KEYS:
        if key in backend.visibility_env_keys:
            assert out[key] == "1", key
        else:
            assert key not in out, key
    assert out["PATH"] == "/bin"
    # The caller's dict is not modified.
    assert env["CUDA_VISIBLE_DEVICES"] == "9" and len(env) == len(ALL_VISIBILITY_KEYS) + 1


def test_musa_child_does_not_inherit_cuda_pin():
    out = get_backend("musa").apply_visibility({"CUDA_VISIBLE_DEVICES": "7"}, "1")
    assert out == {"MUSA_VISIBLE_DEVICES": "1"}


def test_rocm_writes_hip_and_rocr_ascend_writes_both():
    assert get_backend("rocm").apply_visibility({"CUDA_VISIBLE_DEVICES": "0"}, "3") == {
        "HIP_VISIBLE_DEVICES": "3", "ROCR_VISIBLE_DEVICES": "3"}
    assert get_backend("ascend").apply_visibility({}, "2") == {
        "ASCEND_RT_VISIBLE_DEVICES": "2", "ASCEND_VISIBLE_DEVICES": "2"}
    assert get_backend("cuda").visibility_env_keys[0] == "CUDA_VISIBLE_DEVICES"


def test_parse_device_list():
    assert parse_device_list(None) == []
    assert parse_device_list("") == []
    assert parse_device_list(" 5, 6 ,,") == ["5", "6"]
    assert parse_device_list(["1", " 2 ", ""]) == ["1", "2"]
    assert parse_device_list("GPU-1a2b,MIG-3c") == ["GPU-1a2b", "MIG-3c"]


# --- enumeration --------------------------------------------------------------------------------

@pytest.fixture
def clean_visibility(monkeypatch):
    for key in ALL_VISIBILITY_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def _fake_torch(monkeypatch, **namespaces):
    mod = types.ModuleType("torch")
    for ns, api in namespaces.items():
        setattr(mod, ns, api)
    monkeypatch.setitem(sys.modules, "torch", mod)
    return mod


def _api(count=1, name="NVIDIA H200", cap=(9, 0), **extra):
    api = types.SimpleNamespace(
        device_count=lambda: count,
        current_device=lambda: 0,
        get_device_name=lambda i=0: name,
        get_device_capability=lambda i=0: cap,
    )
    for k, v in extra.items():
        setattr(api, k, v)
    return api


@pytest.fixture
def fake_nvsmi(tmp_path, clean_visibility):
    """nvidia-smi on PATH that lists 8 GPUs, as `nvidia-smi --list-gpus` prints them."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    lines = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-0000000{i})\\n" for i in range(8))
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "--list-gpus" ] || exit 9\nprintf "{lines}"\n')
    script.chmod(0o755)
    clean_visibility.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    _fake_torch(clean_visibility, cuda=_api(count=0))
    return bindir


def test_probe_counts_list_command(fake_nvsmi):
    assert get_backend("cuda").enumerate_devices() == [str(i) for i in range(8)]


def test_inherited_visibility_wins_over_probe(fake_nvsmi, monkeypatch):
    # A caller who picked idle cards 5,6 must get 5,6 back, not bare indices 0..7.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert get_backend("cuda").enumerate_devices() == ["5", "6"]
    assert backends.enumerate_devices(get_backend("cuda")) == ["5", "6"]


def test_explicit_wins_over_inherited(fake_nvsmi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    cuda = get_backend("cuda")
    assert cuda.enumerate_devices("2, 3") == ["2", "3"]
    assert cuda.enumerate_devices(["4"]) == ["4"]
    # An empty explicit value is no selection, not "no devices".
    assert cuda.enumerate_devices("") == ["5", "6"]


def test_foreign_visibility_var_is_ignored(clean_visibility):
    clean_visibility.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    _fake_torch(clean_visibility, musa=_api(count=3))
    assert get_backend("musa").enumerate_devices() == ["0", "1", "2"]


def test_rocm_reads_either_of_its_keys(clean_visibility):
    clean_visibility.setenv("ROCR_VISIBLE_DEVICES", "4")
    assert get_backend("rocm").enumerate_devices() == ["4"]
    clean_visibility.setenv("HIP_VISIBLE_DEVICES", "1,2")
    assert get_backend("rocm").enumerate_devices() == ["1", "2"]


def test_torch_probe_when_no_list_command(clean_visibility):
    _fake_torch(clean_visibility, npu=_api(count=4))
    assert get_backend("ascend").enumerate_devices() == ["0", "1", "2", "3"]


def test_falls_back_to_device_zero(clean_visibility, tmp_path):
    clean_visibility.setenv("PATH", str(tmp_path))  # no nvidia-smi
    _fake_torch(clean_visibility, cuda=_api(count=0))
    assert get_backend("cuda").enumerate_devices() == ["0"]
    # A torch whose probe raises is treated like no torch at all.
    _fake_torch(clean_visibility, cuda=types.SimpleNamespace(
        device_count=lambda: (_ for _ in ()).throw(RuntimeError("driver too old"))))
    assert get_backend("cuda").enumerate_devices() == ["0"]
    _fake_torch(clean_visibility)  # torch without a musa namespace
    assert get_backend("musa").enumerate_devices() == ["0"]


def test_failing_list_command_falls_through(clean_visibility, tmp_path):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    script.chmod(0o755)
    clean_visibility.setenv("PATH", str(tmp_path))
    _fake_torch(clean_visibility, cuda=_api(count=2))
    assert get_backend("cuda").enumerate_devices() == ["0", "1"]


def test_device_models_asks_the_name_query_per_device(clean_visibility, tmp_path):
    """nvidia-smi names each device asked for with -i; a device it does not name (or no tool,
    or a runtime without a name query) makes the answer None, never a partial list."""
    script = tmp_path / "nvidia-smi"
    script.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=name" ] && [ "$2" = "--format=csv,noheader" ] || exit 9\n'
                      'case "$4" in 3) echo "NVIDIA H200" ;; 0|GPU-*) echo "NVIDIA H100 80GB HBM3" ;;\n'
                      '*) echo "No devices were found"; exit 6 ;; esac\n')
    script.chmod(0o755)
    clean_visibility.setenv("PATH", str(tmp_path))
    cuda = get_backend("cuda")
    assert cuda.device_models(["3", "0", "GPU-0000"]) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3",
                                                          "NVIDIA H100 80GB HBM3"]
    assert cuda.device_models(["0", "7"]) is None and cuda.device_models([]) is None
    assert get_backend("musa").device_models(["0"]) is None        # no name query: none named
    clean_visibility.setenv("PATH", str(tmp_path / "empty"))       # no nvidia-smi at all
    assert cuda.device_models(["0"]) is None


def test_module_level_enumerate_uses_zl_backend(clean_visibility):
    clean_visibility.setenv("ZL_BACKEND", "musa")
    clean_visibility.setenv("MUSA_VISIBLE_DEVICES", "7")
    assert backends.enumerate_devices() == ["7"]
    assert backends.enumerate_devices(explicit="1,2") == ["1", "2"]


# --- vendor names and capabilities --------------------------------------------------------------

def test_flaggems_vendor_and_torch_namespace():
    table = {name: (get_backend(name).flaggems_vendor, get_backend(name).torch_namespace)
             for name in ALL}
    assert table == {"cuda": ("nvidia", "cuda"), "musa": ("mthreads", "musa"),
                     "rocm": ("amd", "cuda"), "ascend": ("ascend", "npu")}


@pytest.mark.parametrize("name", ALL)
def test_vendor_names_match_upstream_flaggems(name):
    """Each vendor must be a real FlagGems backend package, and FlagGems' device_name for it must
    be the torch namespace used here."""
    backend = get_backend(name)
    assert UPSTREAM["vendors"].get(backend.flaggems_vendor) == backend.torch_namespace, \
        f"{name}: FlagGems has no vendor {backend.flaggems_vendor!r} on torch.{backend.torch_namespace}"


def test_vendor_variables_are_the_ones_flaggems_reads_in_its_order():
    from zl.flaggems import VENDOR_ENV_KEYS
    assert list(VENDOR_ENV_KEYS) == UPSTREAM["vendor_env_keys"]


def test_the_fake_tree_names_vendors_as_upstream_does():
    """tests/fake_flaggems stands in for FlagGems in every CPU run: its vendor packages and
    device finder must say what upstream's say."""
    backend_dir = ROOT / "tests" / "fake_flaggems" / "src" / "flag_gems" / "runtime" / "backend"
    finder = _load(backend_dir / "device_finder.py")
    assert list(finder.VENDOR_ENV_KEYS) == UPSTREAM["vendor_env_keys"]
    assert {v: UPSTREAM["vendors"].get(v) for v in finder.KNOWN_VENDORS} == finder.KNOWN_VENDORS
    packages = sorted(backend_dir.glob("_*/__init__.py"))
    assert packages
    for init in packages:
        info = _load(init).vendor_info
        assert f"_{info.vendor_name}" == init.parent.name
        assert UPSTREAM["vendors"].get(info.vendor_name) == info.device_name, init


def _load(path: Path) -> types.ModuleType:
    """A module of the fake tree by path, without importing the fake flag_gems package."""
    spec = importlib.util.spec_from_file_location(f"zl_test_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capability_flags():
    flags = {n: (get_backend(n).supports_cuda_graph, get_backend(n).supports_mm_cluster_fix,
                 get_backend(n).supports_triton_hooks) for n in ALL}
    assert flags == {"cuda": (True, True, True), "musa": (True, False, True),
                     "rocm": (False, False, True), "ascend": (False, False, True)}
    for name in ALL:
        assert isinstance(get_backend(name).compat_plugins, tuple)


# --- identity -----------------------------------------------------------------------------------

def test_identity_h200():
    fake = types.SimpleNamespace(cuda=_api())
    info = get_backend("cuda").device_identity(fake)
    assert info == {"backend": "cuda", "device_name": "NVIDIA H200", "device_arch": "9.0",
                    "timer_api": "torch.cuda", "flaggems_vendor": "nvidia"}


def test_identity_reads_imported_torch_by_default(monkeypatch):
    _fake_torch(monkeypatch, musa=_api(name="MTT S5000", cap=(3, 1)))
    info = get_backend("musa").device_identity()
    assert (info["device_name"], info["device_arch"], info["flaggems_vendor"]) == (
        "MTT S5000", "3.1", "mthreads")


def _boom(*_a, **_k):
    raise RuntimeError("CUDA driver initialization failed")


@pytest.mark.parametrize("fake", [
    types.SimpleNamespace(),                                       # no cuda namespace at all
    types.SimpleNamespace(cuda=types.SimpleNamespace()),           # namespace without methods
    types.SimpleNamespace(cuda=_api(count=0)),                     # no device
    types.SimpleNamespace(cuda=types.SimpleNamespace(device_count=_boom)),
    types.SimpleNamespace(cuda=_api(current_device=_boom)),
    types.SimpleNamespace(cuda=_api(get_device_name=_boom, get_device_capability=_boom)),
    types.SimpleNamespace(cuda=_api(get_device_capability=lambda i=0: None)),
    types.SimpleNamespace(cuda=_api(device_count=lambda: "many")),
])
def test_identity_never_raises(fake):
    info = get_backend("cuda").device_identity(fake)
    assert set(info) == {"backend", "device_name", "device_arch", "timer_api", "flaggems_vendor"}
    assert info["timer_api"] == "torch.cuda" and info["flaggems_vendor"] == "nvidia"
    assert all(isinstance(v, str) for v in info.values())


def test_identity_keeps_name_when_arch_fails():
    info = get_backend("cuda").device_identity(
        types.SimpleNamespace(cuda=_api(get_device_capability=_boom)))
    assert (info["device_name"], info["device_arch"]) == ("NVIDIA H200", "")


def test_identity_on_this_machine_does_not_raise():
    for name in ALL:
        info = get_backend(name).device_identity()
        assert info["backend"] == name


def test_rocm_arch_is_the_gfx_target():
    props = types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4)
    fake = types.SimpleNamespace(cuda=_api(name="AMD Instinct MI300X",
                                           get_device_properties=lambda i=0: props))
    assert get_backend("rocm").device_identity(fake)["device_arch"] == "gfx942"
    # Without gcnArchName it falls back to the capability.
    fake = types.SimpleNamespace(cuda=_api(cap=(9, 4)))
    assert get_backend("rocm").device_identity(fake)["device_arch"] == "9.4"


def test_ascend_arch_is_the_soc_name():
    fake = types.SimpleNamespace(npu=_api(name="Ascend910B3", cap=None))
    info = get_backend("ascend").device_identity(fake)
    assert (info["device_name"], info["device_arch"], info["timer_api"]) == (
        "Ascend910B3", "Ascend910B3", "torch.npu")


# --- capture-error classification ---------------------------------------------------------------

TORCH_FOOTER = ("\nCUDA kernel errors might be asynchronously reported at some other API call, "
                "so the stacktrace below might be incorrect.\nFor debugging consider passing "
                "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                "assertions.\n")
MUSA_FOOTER = ("\nMUSA kernel errors might be asynchronously reported at some other API call, "
               "so the stacktrace below might be incorrect.\nFor debugging consider passing "
               "MUSA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_MUSA_DSA` to enable device-side "
               "assertions.\n")

CLASSIFY_TABLE = [
    # (backend, message, verdict)
    ("cuda", "CUDA error: operation not permitted when stream is capturing" + TORCH_FOOTER,
     "recoverable"),
    ("cuda", "Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. "
             "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", "recoverable"),
    ("cuda", "CUDA error: operation failed due to a previous error during capture" + TORCH_FOOTER,
     "recoverable"),
    ("cuda", "CUDA error: an illegal memory access was encountered" + TORCH_FOOTER, "fatal"),
    ("cuda", "CUDA error: an illegal instruction was encountered", "fatal"),
    ("cuda", "CUDA error: device-side assert triggered" + TORCH_FOOTER, "fatal"),
    ("cuda", "CUDA error: misaligned address", "fatal"),
    ("cuda", "CUDA error: unspecified launch failure", "fatal"),
    ("cuda", "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 139.81 GiB", "fatal"),
    ("cuda", "Triton Error [CUDA]: an illegal memory access was encountered", "fatal"),
    ("cuda", "CUDA_ERROR_ILLEGAL_ADDRESS cudaErrorIllegalAddress", "fatal"),
    ("cuda", "MUSA error: unknown error", "recoverable"),
    ("musa", "MUSA error: unknown error" + MUSA_FOOTER, "poisoned"),
    ("musa", "Triton Error [MUSA]: unknown error", "poisoned"),
    ("musa", "Cannot call MUSAGeneratorImpl::current_seed during MUSA graph capture"
             + MUSA_FOOTER, "recoverable"),
    ("musa", "MUSA error: operation not permitted when stream is capturing" + MUSA_FOOTER,
     "recoverable"),
    ("musa", "MUSA error: an illegal memory access was encountered" + MUSA_FOOTER, "fatal"),
    ("musa", "MUSA out of memory. Tried to allocate 1.00 GiB", "fatal"),
    ("rocm", "HIP error: an illegal memory access was encountered", "fatal"),
    ("rocm", "hipErrorIllegalAddress", "fatal"),
    ("rocm", "HIP error: operation not permitted when stream is capturing", "recoverable"),
    ("ascend", "EZ9999: Inner Error! something the runtime did not like", "recoverable"),
    ("ascend", "NPU out of memory. Tried to allocate 2.00 GiB", "fatal"),
]


@pytest.mark.parametrize("name,message,verdict", CLASSIFY_TABLE)
def test_classification_table(name, message, verdict):
    assert get_backend(name).classify_capture_error(RuntimeError(message)) == verdict


@pytest.mark.parametrize("name", ALL)
def test_dsa_footer_alone_is_never_fatal(name):
    """torch appends this to every accelerator error; it says nothing about the cause."""
    exc = RuntimeError("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert get_backend(name).classify_capture_error(exc) == "recoverable"
    assert get_backend(name).classify_capture_error(RuntimeError(TORCH_FOOTER)) == "recoverable"


def test_cause_chain_is_read():
    cuda = get_backend("cuda")
    try:
        try:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise RuntimeError("graph capture failed") from inner
    except RuntimeError as outer:
        assert cuda.classify_capture_error(outer) == "fatal"
    try:
        try:
            raise RuntimeError("MUSA error: unknown error")
        except RuntimeError:
            raise ValueError("cleanup after capture failed")  # implicit __context__
    except ValueError as outer:
        assert get_backend("musa").classify_capture_error(outer) == "poisoned"


def test_fatal_wins_over_poisoned():
    exc = RuntimeError("MUSA error: unknown error; then an illegal memory access")
    assert get_backend("musa").classify_capture_error(exc) == "fatal"


def test_classification_survives_odd_exceptions():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    exc = RuntimeError("loop")
    exc.__context__ = exc  # a cycle must terminate
    for name in ALL:
        backend = get_backend(name)
        assert backend.classify_capture_error(Broken()) == "recoverable"
        assert backend.classify_capture_error(exc) == "recoverable"
        assert backend.classify_capture_error(MemoryError()) in CAPTURE_VERDICTS


def test_exception_type_name_is_part_of_the_text():
    class OutOfMemoryError(RuntimeError):
        pass

    # The type alone does not read as "out of memory"; the message does.
    assert get_backend("cuda").classify_capture_error(OutOfMemoryError("")) == "recoverable"
    assert get_backend("cuda").classify_capture_error(
        OutOfMemoryError("CUDA out of memory.")) == "fatal"


# --- deny list ----------------------------------------------------------------------------------

def test_deny_list_is_per_backend_and_keyed_by_function_name():
    musa, cuda = get_backend("musa"), get_backend("cuda")
    assert musa.denies_capture("unique2")
    # `unique` is the benchmark FILE stem; an entry written that way would never match op=unique2.
    assert not musa.denies_capture("unique")
    assert not musa.denies_capture("test_unique2")
    assert not musa.denies_capture("softmax")
    assert not musa.denies_capture("")
    for name in ("cuda", "rocm", "ascend"):
        assert not get_backend(name).denies_capture("unique2"), name
    assert cuda.capture_deny_ops == ()


# --- telemetry argv -----------------------------------------------------------------------------

def test_cuda_telemetry_argv():
    cuda = get_backend("cuda")
    unpinned = cuda.telemetry_command("")
    assert unpinned[0] == "nvidia-smi"
    assert "--format=csv,noheader,nounits" in unpinned
    assert "-i" not in unpinned and not any("{dev}" in a for a in unpinned)
    assert cuda.telemetry_command() == unpinned
    assert cuda.telemetry_command("   ") == unpinned
    assert cuda.telemetry_command("3") == unpinned + ["-i", "3"]
    # The query lists the nvidia-smi fields in TELEMETRY_FIELDS order; the parser relies on it.
    query = next(a for a in unpinned if a.startswith("--query-gpu="))
    assert query.split("=", 1)[1].split(",") == [
        "index", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "utilization.gpu"]


def test_musa_telemetry_argv():
    musa = get_backend("musa")
    argv = musa.telemetry_command("")
    assert argv == ["mthreads-gmi", "-q", "-d", "TEMPERATURE,CLOCK,POWER,UTILIZATION", "--json"]
    assert musa.telemetry_command("7") == argv + ["-i", "7"]


def test_backends_without_sampler():
    for name in ("rocm", "ascend"):
        assert get_backend(name).telemetry_command("0") == []
        assert get_backend(name).parse_telemetry("0, 1, 2, 3, 4, 5") == []
    assert DeviceBackend().telemetry_command("0") == []


# --- telemetry parsers --------------------------------------------------------------------------

# Shape of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` on a multi-GPU node; boards
# that cannot report power print "[N/A]" (or "[Not Supported]") in that column.
NVSMI_CSV = ("0, 1980, 3201, 41, 122.35, 63\n"
             "1, 1755, 3201, 38, [N/A], 0\n"
             "2, 345, 3201, 29, 75.10, [Not Supported]\n")

# mthreads-gmi -q --json as an S5000 prints it: units glued to values and a key with a trailing
# space ("Power Draw ").
MTGMI_JSON = """
{
    "Attached GPUs": "8",
    "GPU": [
        {
            "Index": "7",
            "Temperature": {"GPU Current Temp": "36C"},
            "Clocks": {"Graphics": "1888MHz", "Memory": "2500MHz", "Video": "0MHz"},
            "Power Readings": {"Power Draw ": "477.68W", "Current Power Limit": "950.00W"},
            "Utilization": {"Gpu": "87%", "Memory": "14%"}
        },
        {
            "Index": "6",
            "Temperature": {"GPU Current Temp": "N/A"},
            "Clocks": {"Graphics": "1000MHz", "Memory": "2500MHz"},
            "Utilization": {"Gpu": "0%"}
        }
    ]
}
"""


def test_nvidia_smi_csv():
    rows = get_backend("cuda").parse_telemetry(NVSMI_CSV)
    assert rows == [
        {"index": "0", "sm_clock_mhz": "1980", "mem_clock_mhz": "3201", "temp_c": "41",
         "power_w": "122.35", "util_pct": "63"},
        {"index": "1", "sm_clock_mhz": "1755", "mem_clock_mhz": "3201", "temp_c": "38",
         "power_w": "", "util_pct": "0"},
        {"index": "2", "sm_clock_mhz": "345", "mem_clock_mhz": "3201", "temp_c": "29",
         "power_w": "75.10", "util_pct": ""},
    ]


def test_nvidia_smi_noise_is_skipped():
    raw = ("index, clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, "
           "power.draw [W], utilization.gpu [%]\n"
           "WARNING: infoROM is corrupted at gpu 0000:04:00.0\n" + NVSMI_CSV.splitlines()[0])
    assert [r["index"] for r in get_backend("cuda").parse_telemetry(raw)] == ["0"]


def test_mthreads_gmi_json():
    rows = get_backend("musa").parse_telemetry(MTGMI_JSON)
    assert rows == [
        {"index": "7", "sm_clock_mhz": "1888", "mem_clock_mhz": "2500", "temp_c": "36",
         "power_w": "477.68", "util_pct": "87"},
        {"index": "6", "sm_clock_mhz": "1000", "mem_clock_mhz": "2500", "temp_c": "",
         "power_w": "", "util_pct": "0"},
    ]


def test_mthreads_gmi_single_gpu_object_and_banner():
    raw = ("mthreads-gmi version 1.14.0\n"
           '{"GPU": {"Index": "0", "Clocks": {"Graphics": "1750MHz", "Memory": "2500MHz"},'
           ' "Temperature": {"GPU Current Temp": "40C"},'
           ' "Power Readings": {"Power Draw": "300.5W"}, "Utilization": {"Gpu": "5%"}}}\n'
           "trailing text the tool printed after the JSON\n")
    assert get_backend("musa").parse_telemetry(raw) == [
        {"index": "0", "sm_clock_mhz": "1750", "mem_clock_mhz": "2500", "temp_c": "40",
         "power_w": "300.5", "util_pct": "5"}]


def test_same_columns_on_both_samplers():
    a = get_backend("cuda").parse_telemetry(NVSMI_CSV)[0]
    b = get_backend("musa").parse_telemetry(MTGMI_JSON)[0]
    assert tuple(a) == tuple(b) == TELEMETRY_FIELDS


@pytest.mark.parametrize("raw", [
    "", "no such tool", "{broken json", "No devices were found", "[1, 2]",
    '{"GPU": "none"}', '{"GPU": [1, "x", {"Clocks": {"Graphics": "1MHz"}}]}',
    "0, 1, 2", None,
])
def test_garbage_parses_to_nothing(raw):
    for name in ("cuda", "musa"):
        assert get_backend(name).parse_telemetry(raw) == [], name
