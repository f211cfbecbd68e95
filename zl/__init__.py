"""zl_bench's code. The top level of the repository holds only entry points: the `-p`
plugins (`_*_plugin.py`, thin pytest hook modules), the drivers (`*.sh`) and the CLIs.

Shared kit (every plugin and tool uses these, nothing re-implements them):
- `zl.config`    the run configuration: built once from the variables, run_config.json,
                 read by every plugin (`--zl-config`); the one reader of the user's variables.
- `zl.childenv`  the environment of child processes (a run's pytest, a batch case, a sweep
                 shard) and of this process's libraries (GEMS_VENDOR), from the configuration.
- `zl.identity`  run_identity.json: the run's caliber, merged atomically.
- `zl.term`      terminal colour, plugin log lines, the ANSI-stripping tee for run.log.
- `zl.atomic`    atomic file writes.
- `zl.onoff`     the one reading of on/off words; `zl.switches` reads a variable with it.
- `zl.markers`   the grep-able marker vocabulary.
- `zl.patching`  one patch/undo stack for what plugins change in the process.
- `zl.options`   the `zl_bench` pytest option group (each option a setting of zl.config).
- `zl.registry`  a plugin's session object: registered when active, closed at unconfigure.
- `zl.plan`      which `-p` plugins a run loads (plugin_plan.py is its CLI).
- `zl.backends`  device adapters (cuda, musa, rocm, ascend); resolves ZL_BACKEND once.
- `zl.flaggems`  FlagGems facts: node parsing, Benchmark classes, vendor env, commit.
- `zl.prepare`   run_pytest.sh's pre-pytest steps, before and after it locks OUT_DIR.
- `zl.preflight` the named preflight checks (exit 3), TMPDIR, and a campaign's preflight.
- `zl.rundir`    claim a run directory, move an earlier run aside, reclaim dead runs' temporaries.
- `zl.shapefile` SHAPE_FILE checks (preflight) and the inline shape yaml.
- `zl.supervise` run a command tied to its driver (own process group, parent-death signal).

Rooms behind the plugins and tools:
- `zl.runlog`    run.log parsing, size folding, caliber fields, A/B statistics.
- `zl.ir`        IR collection (collect, hooks), dumping, naming and the one fingerprint rule.
- `zl.device`    GEMS_VENDOR from the backend, device identity, foreign-vendor report.
- `zl.seed`      fixed seeds and the generator states restored afterwards.
- `zl.shapes`    the shape yaml laid over Benchmark classes; shapes.yaml record.
- `zl.report.table` console result tables (fold constant inputs, colour status words).
- `zl.autotune`  autotune record/replay: config store, tuner wrapper, session (behind
                 `_autotune_record_plugin`).
- `zl.warmup`    the parallel autotune sweep: plan, shard processes, merge (behind
                 `_parallel_warmup_plugin`).
- `zl/sh/`       shell libraries the drivers source (A/B prologue, IR fingerprint wrappers,
                 the reader of zl.prepare's records).
"""
