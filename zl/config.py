"""The run configuration: one typed object, built once, read by every plugin.

The user interface stays the environment variables (README's table) and the `--zl-*`
options. This module is the one place that reads them:

- `run_variables(env)` validates run_pytest.sh's variables (BENCH_LEVEL, USE_FLAGTUNE,
  ZL_DIRECT_REPEAT, ...), raising `ConfigError` (run_pytest.sh: exit 2) that names the
  variable and the accepted values.
- `from_environ(env)` captures the plugin settings into a frozen `RunConfig`. zl.prepare
  resolves the rest (node, backend, directories) and writes it to OUT_DIR/run_config.json;
  run_pytest.sh passes that file to pytest as `--zl-config FILE`.
- `of(pytest_config)` is the accessor every plugin uses: the `--zl-config` file, else the
  same builder run on this process's environment (a direct `pytest -p _timing_plugin`
  user), cached in the config's stash; a `--zl-*` option given on the command line
  replaces its setting (`zl.options.value` reads one setting's word through it).
- `current()` is that configuration for code that holds no pytest config (log colour,
  the identity file's directory): the session's while one is active, else the environment.

Why one reader: two readers of one variable once read `ZL_ENABLE_AUTOTUNE=' 0'` two ways,
and a fact handed over through os.environ depends on hook order and leaks into every child
process. A setting whose bad word is a pytest usage error (exit 4, where its `--zl-*` option
is checked too) is kept as the word its plugin parses; what run_pytest.sh refuses before
pytest (exit 2) is parsed and typed here (`RunVariables`, the run facts of `RunConfig`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from zl import atomic
from zl.onoff import SwitchError, parse_switch

CONFIG_NAME = "run_config.json"
SCHEMA_VERSION = 1
OPTION = "--zl-config"
OPTION_DEST = "zl_config"

NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]+$")
DTYPE_RE = re.compile(r"^[A-Za-z0-9_]+$")
DIRECT_REPEAT_RANGE = (1, 1000)
SEED_RANGE = (0, 2 ** 32 - 1)   # numpy's seed range; torch and random take it too
BENCH_LEVELS = ("core", "comprehensive")
COLOR_WORDS = ("", "always", "never")


class ConfigError(ValueError):
    """A variable, option or run_config.json with a bad value; the message names it."""


class Setting(NamedTuple):
    """A plugin setting: RunConfig attribute, its variable, its `--zl-*` option, default."""
    attr: str
    env: str
    flag: str
    default: str


# Every setting a plugin reads. The option's help lives with the plugin that declares it
# (zl.options.add checks variable and default against this table).
SETTINGS: Tuple[Setting, ...] = (
    Setting("backend", "ZL_BACKEND", "--zl-backend", "cuda"),
    Setting("device", "ZL_DEVICE", "--zl-device", ""),
    Setting("device_share", "ZL_DEVICE_SHARE", "--zl-device-share", "1"),
    Setting("op", "ZL_OP", "--zl-op", ""),
    Setting("out_dir", "OUT_DIR", "--zl-out-dir", ""),
    Setting("provider", "ZL_PROVIDER", "--zl-provider", "flaggems"),
    Setting("bench_level", "ZL_BENCH_LEVEL", "--zl-bench-level", ""),
    Setting("shape_file", "ZL_SHAPE_FILE", "--zl-shape-file", ""),
    Setting("shape_mode", "ZL_SHAPE_MODE", "--zl-shape-mode", ""),
    Setting("dtype_fallback", "ZL_DTYPE_FALLBACK", "--zl-dtype-fallback", "all"),
    Setting("seed", "ZL_SEED", "--zl-seed", "0"),
    Setting("record_dir", "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR", "--zl-autotune-record-dir", ""),
    Setting("replay_dir", "FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", "--zl-autotune-replay-dir", ""),
    Setting("isolate_tuner_cache", "ZL_ISOLATE_TUNER_CACHE", "--zl-isolate-tuner-cache", "0"),
    Setting("parallel_warmup_gpus", "PARALLEL_WARMUP_GPUS", "--zl-parallel-warmup-gpus", ""),
    Setting("parallel_devices", "ZL_PARALLEL_DEVICES", "--zl-parallel-devices", ""),
    Setting("parallel_warmup_timeout", "ZL_PARALLEL_WARMUP_TIMEOUT", "--zl-parallel-warmup-timeout", "3600"),
    Setting("parallel_worker", "ZL_PARALLEL_WORKER", "--zl-parallel-worker", ""),
    Setting("cudagraph", "ZL_ENABLE_CUDAGRAPH", "--zl-cudagraph", "auto"),
    Setting("direct_repeat", "ZL_DIRECT_REPEAT", "--zl-direct-repeat", "1"),
    Setting("graph_warmup_ms", "ZL_GRAPH_WARMUP_MS", "--zl-graph-warmup-ms", "25"),
    Setting("l2", "ZL_L2", "--zl-l2", "warm"),
    Setting("cold_clock", "ZL_COLD_CLOCK", "--zl-cold-clock", "auto"),
    Setting("judge_only", "ZL_JUDGE_ONLY", "--zl-judge-only", "0"),
    Setting("time_torch", "ZL_TIME_TORCH", "--zl-time-torch", "1"),
    Setting("gc_freeze", "ZL_GC_FREEZE", "--zl-gc-freeze", "1"),
    Setting("device_overlap", "ZL_DEVICE_OVERLAP", "--zl-device-overlap", "1"),
    Setting("timing_lock", "ZL_TIMING_LOCK", "--zl-timing-lock", ""),
    Setting("enable_ir", "ZL_ENABLE_IR", "--zl-enable-ir", "1"),
    Setting("ttgir_dump_dir", "FLAGGEMS_PERF_TTGIR_DUMP_DIR", "--zl-ttgir-dump-dir", ""),
    Setting("ir_levels", "ZL_IR_LEVELS", "--zl-ir-levels", "ttgir"),
    Setting("enable_results", "ZL_ENABLE_RESULTS", "--zl-results", "1"),
    Setting("results_prewarm", "ZL_RESULTS_PREWARM", "--zl-results-prewarm", "1"),
    Setting("pretty_fold", "ZL_PRETTY_FOLD", "--zl-pretty-fold", "1"),
    Setting("color", "FLAGGEMS_PERF_COLOR", "--zl-color", ""),
    Setting("musa_compat", "ZL_MUSA_COMPAT", "--zl-musa-compat", "1"),
)
BY_FLAG: Dict[str, Setting] = {s.flag: s for s in SETTINGS}
BY_ENV: Dict[str, Setting] = {s.env: s for s in SETTINGS}


@dataclass(frozen=True)
class RunConfig:
    """One run's settings. The `SETTINGS` fields hold the word as given (its plugin parses
    it); the fields below them are the run facts zl.prepare resolved, typed."""
    backend: str = "cuda"
    device: str = ""
    device_share: str = "1"
    op: str = ""
    out_dir: str = ""
    provider: str = "flaggems"
    bench_level: str = ""
    shape_file: str = ""
    shape_mode: str = ""
    dtype_fallback: str = "all"
    seed: str = "0"
    record_dir: str = ""
    replay_dir: str = ""
    isolate_tuner_cache: str = "0"
    parallel_warmup_gpus: str = ""
    parallel_devices: str = ""
    parallel_warmup_timeout: str = "3600"
    parallel_worker: str = ""
    cudagraph: str = "auto"
    direct_repeat: str = "1"
    graph_warmup_ms: str = "25"
    l2: str = "warm"
    cold_clock: str = "auto"
    judge_only: str = "0"
    time_torch: str = "1"
    gc_freeze: str = "1"
    device_overlap: str = "1"
    timing_lock: str = ""
    enable_ir: str = "1"
    ttgir_dump_dir: str = ""
    ir_levels: str = "ttgir"
    enable_results: str = "1"
    results_prewarm: str = "1"
    pretty_fold: str = "1"
    color: str = ""
    musa_compat: str = "1"
    # Run facts (zl.prepare): the node, what the run's identity stub records, the private
    # directories the child environment points at.
    op_file: str = ""
    test_file: str = ""
    flaggems_dir: str = ""
    dtypes: Tuple[str, ...] = ()
    use_flagtune: bool = False
    campaign_id: str = ""
    replay_from: str = ""
    tuner_cache: str = ""
    tuner_cache_dir: str = ""
    triton_cache_dir: str = ""
    no_color: bool = False

    def word(self, flag: str) -> str:
        """The setting behind `--zl-...` flag, as its plugin parses it."""
        return getattr(self, setting(flag).attr)

    def to_json(self) -> str:
        data = asdict(self)
        data["dtypes"] = list(self.dtypes)
        return json.dumps({"schema_version": SCHEMA_VERSION, **data}, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = CONFIG_NAME) -> "RunConfig":
        """The file's config; ConfigError naming the file and the first field that is wrong."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source} is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.pop("schema_version", None) != SCHEMA_VERSION:
            raise ConfigError(f"{source} is not a zl_bench run configuration of schema {SCHEMA_VERSION}")
        known = {f.name: f for f in fields(cls)}
        unknown, missing = sorted(set(data) - set(known)), sorted(set(known) - set(data))
        if unknown or missing:
            raise ConfigError(f"{source}: unknown field(s) {unknown}, missing field(s) {missing}")
        for name, value in data.items():
            want = _TYPES[name]
            ok = (isinstance(value, list) and all(isinstance(v, str) for v in value)) if want is tuple \
                else type(value) is want
            if not ok:
                raise ConfigError(f"{source}: field {name!r} must be {want.__name__}, got {value!r}")
        data["dtypes"] = tuple(data["dtypes"])
        return cls(**data)


_TYPES = {"dtypes": tuple, "use_flagtune": bool, "no_color": bool}
for _f in fields(RunConfig):
    _TYPES.setdefault(_f.name, str)


def setting(flag: str) -> Setting:
    try:
        return BY_FLAG[flag]
    except KeyError:
        raise LookupError(f"{flag} is not a zl_bench setting (zl.config.SETTINGS)") from None


# ------------------------------------------------------------------ building

def environ() -> Dict[str, str]:
    """A copy of this process's environment: the one read of the user's variables. Settings
    go through `from_environ`; a driver's own variables (OP, TEST_NODE, ZL_RUNS_ROOT,
    ZL_PYTHON, ...) are read from this copy by the code that resolves them."""
    return dict(os.environ)


def from_environ(env: Optional[Mapping[str, str]] = None) -> RunConfig:
    """The plugin settings from `env` (default: this process's environment); unset
    variables take their defaults. Typed run facts are only checked where they are read
    (`run_variables`), so a direct pytest user's environment never fails here."""
    env = environ() if env is None else env
    words = {s.attr: env[s.env] if s.env in env else s.default for s in SETTINGS}
    return RunConfig(**words, op_file=env.get("ZL_OP_FILE", ""),
                     campaign_id=env.get("ZL_CAMPAIGN_ID", ""),
                     no_color=env.get("NO_COLOR", "") != "")


def load(path: str) -> RunConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{OPTION} {path}: cannot read it ({exc})") from None
    return RunConfig.from_json(text, source=path)


def write(cfg: RunConfig, out_dir: str) -> Path:
    """OUT_DIR/run_config.json, atomically."""
    path = Path(out_dir) / CONFIG_NAME
    atomic.write_text(path, cfg.to_json())
    return path


def with_words(cfg: RunConfig, given: Mapping[str, str]) -> RunConfig:
    """`cfg` with settings replaced by flag -> word (the command line's)."""
    return replace(cfg, **{setting(flag).attr: str(word) for flag, word in given.items()})


# ------------------------------------------------------------------ run_pytest.sh's variables

@dataclass(frozen=True)
class RunVariables:
    """run_pytest.sh's own variables, validated (README's table)."""
    bench_level: str
    use_flagtune: bool
    isolate: bool
    color: str
    direct_repeat: int
    seed: int
    dtypes: Tuple[str, ...]
    replay_from: str


def check_name(var: str, value: str) -> str:
    """An OP / OP_FILE / OPS part: becomes a path component and a node name, so no
    separators, no `..`, no glob characters."""
    if not NAME_RE.match(value or "") or ".." in value:
        raise ConfigError(f"{var}={value!r} is not an operator name ([A-Za-z0-9_.@-], no '..')")
    return value


def check_dtypes(var: str, value: str) -> List[str]:
    words = value.replace(",", " ").split()
    for word in words:
        if not DTYPE_RE.match(word):
            raise ConfigError(f"{var}={value!r}: {word!r} is not a dtype name ([A-Za-z0-9_])")
    return words


def int_in_range(var: str, raw: Optional[str], default: int, lo: int, hi: int) -> int:
    text = (raw or "").strip()
    if not text:
        return default
    # Length first: int() of a 20-digit string is fine, but a huge repeat count hangs a run.
    if not re.fullmatch(r"[0-9]{1,12}", text) or not lo <= int(text) <= hi:
        raise ConfigError(f"{var}={raw!r} must be an integer in {lo}..{hi}")
    return int(text)


def switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off variable through zl.onoff; a bad word is a ConfigError naming it."""
    try:
        return parse_switch(env.get(name), default, name=name)
    except SwitchError as exc:
        raise ConfigError(str(exc)) from None


def run_variables(env: Mapping[str, str]) -> RunVariables:
    """run_pytest.sh's variables, each bad value a ConfigError (exit 2 there)."""
    level = env.get("BENCH_LEVEL") or "core"
    if level not in BENCH_LEVELS:
        raise ConfigError(f"BENCH_LEVEL must be core or comprehensive (got: {level})")
    color = env.get("FLAGGEMS_PERF_COLOR") or ""
    if color.lower() not in COLOR_WORDS:
        raise ConfigError(f"FLAGGEMS_PERF_COLOR must be always, never or empty (got: {color})")
    return RunVariables(
        bench_level=level,
        use_flagtune=switch(env, "USE_FLAGTUNE", False),
        isolate=switch(env, "ZL_ISOLATE_TUNER_CACHE", False),
        color=color.lower(),
        direct_repeat=int_in_range("ZL_DIRECT_REPEAT", env.get("ZL_DIRECT_REPEAT"), 1, *DIRECT_REPEAT_RANGE),
        seed=int_in_range("ZL_SEED", env.get("ZL_SEED"), 0, *SEED_RANGE),
        dtypes=tuple(check_dtypes("DTYPES", env.get("DTYPES") or "")),
        replay_from=env.get("REPLAY_FROM") or "")


# ------------------------------------------------------------------ the pytest side

# The active session: (its pytest config, its configuration with the command line applied).
_ACTIVE: List[Any] = []


def _base(pytest_config: Any, path: Optional[str]) -> RunConfig:
    """The file's or the environment's config, once per pytest config (its stash). A real
    session (one that runs cleanups at its end) becomes the process's `current()` until then."""
    stash = getattr(pytest_config, "stash", None)
    if stash is not None and _STASH_KEY is not None and _STASH_KEY in stash:
        return stash[_STASH_KEY]
    try:
        cfg = load(path) if path else from_environ()
    except ConfigError as exc:   # a --zl-config file that cannot be used: pytest's usage error, exit 4
        if _STASH_KEY is None:
            raise
        raise _pytest.UsageError(str(exc)) from None
    if stash is not None and _STASH_KEY is not None:
        stash[_STASH_KEY] = cfg
        cleanup = getattr(pytest_config, "add_cleanup", None)
        if cleanup is not None:
            _ACTIVE[:] = [pytest_config, cfg]
            cleanup(_ACTIVE.clear)
    return cfg


def _activate(pytest_config: Any, cfg: RunConfig) -> RunConfig:
    if _ACTIVE and _ACTIVE[0] is pytest_config:
        _ACTIVE[1] = cfg
    return cfg


def _getoption(pytest_config: Any, dest: str) -> Optional[str]:
    getoption = getattr(pytest_config, "getoption", None)
    if getoption is None:
        return None
    try:
        return getoption(dest, default=None)
    except (ValueError, AttributeError):
        return None


def of(pytest_config: Any) -> RunConfig:
    """The session's configuration: `--zl-config FILE`, else this process's environment;
    each `--zl-*` option given on the command line replaces its setting."""
    base = _base(pytest_config, _getoption(pytest_config, OPTION_DEST))
    given = {s.flag: w for s in SETTINGS
             if (w := _getoption(pytest_config, s.flag.lstrip("-").replace("-", "_"))) is not None}
    return _activate(pytest_config, with_words(base, given) if given else base)


def early_of(early_config: Any) -> RunConfig:
    """of() in pytest_load_initial_conftests, before the full parse: the command line as far
    as pytest has read it (known_args_namespace)."""
    ns = getattr(early_config, "known_args_namespace", None)
    base = _base(early_config, getattr(ns, OPTION_DEST, None))
    given = {s.flag: w for s in SETTINGS
             if (w := getattr(ns, s.flag.lstrip("-").replace("-", "_"), None)) is not None}
    return _activate(early_config, with_words(base, given) if given else base)


def current() -> RunConfig:
    """The active session's configuration, else this process's environment."""
    return _ACTIVE[1] if _ACTIVE else from_environ()


try:   # pytest is there for the plugins; zl.prepare and the CLIs run without it
    import pytest as _pytest
    _STASH_KEY: Any = _pytest.StashKey[RunConfig]()
except ImportError:   # pragma: no cover - zl.prepare without pytest
    _STASH_KEY = None
