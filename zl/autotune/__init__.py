"""Autotune record / replay: the code behind `_autotune_record_plugin` (and the store the
parallel sweep in `zl.warmup` publishes into).

- `configs`  autotune keys and Triton Configs <-> JSON (process-stable text, hooks kept).
- `records`  the on-disk store `autotune_records/<op>.json` + `meta.json`: write, load,
             validate, and `open_replay`, which names why a record cannot be replayed.
- `session`  one session's picks: what was recorded, replayed or tuned live (fallbacks).
- `tuner`    the Autotuner.run wrapper and its cache proxy, installed through a PatchStack.
- `libentry` FlagGems' LibEntry dispatch caches, emptied for the session and restored.
- `isolation` the check that ZL_ISOLATE_TUNER_CACHE=1 really took effect.
- `options`  the pytest options both plugins read, and the sweep's hand-over (`PRESWEPT`).
"""

RECORD_DIR_ENV = "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"
REPLAY_DIR_ENV = "FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"
