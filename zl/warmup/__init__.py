"""The parallel autotune sweep behind `_parallel_warmup_plugin`.

- `yamlkeys` which yaml entry FlagGems would read for an op (static, with `ast`) and its shapes.
- `plan`     whether to sweep in parallel, or `StepBack` with the reason (and the settings read).
- `shards`   sharding, merging and the shard processes: started in their own process
             groups, bounded by a timeout, killed on every exit path, dying with their parent.
- `sweep`    one sweep: shard jobs, run, merge, publish into the record dir.
"""

GPUS_ENV = "PARALLEL_WARMUP_GPUS"
DEVICES_ENV = "ZL_PARALLEL_DEVICES"
WORKER_ENV = "ZL_PARALLEL_WORKER"
TIMEOUT_ENV = "ZL_PARALLEL_WARMUP_TIMEOUT"
# The whole sweep's bound when the variable is unset: long enough for a large shape list
# on one device, short enough that a hung shard cannot hold a campaign cell forever.
DEFAULT_TIMEOUT_S = 3600.0
