"""pytest plugin: the graph timer's entry point on the design card; `_timing_plugin` installs it.

What it patches: nothing by itself. Graph timing (`zl.timing.graph`: per-shape capture of
`triton.testing.do_bench` calls with an honest, marked fallback; `zl.timing.backward`:
backward benchmarks run and are captured on a side stream) is installed by `_timing_plugin`
when the backend declares graph capture, and its pytest hooks are registered there as the
object "zl_cudagraph", undone at unconfigure.

When it steps back: always, on its own; loaded without `_timing_plugin` it says so and leaves
do_bench untouched.

Why: the decision whether graph capture applies (backend capability, ZL_ENABLE_CUDAGRAPH)
lives in one place, the timing plugin; this module stays on no `-p` list and imports no
other plugin module.
"""

from zl.term import log
from zl.timing import GRAPH_LOG_TAG
from zl.timing.session import TIMING_PLUGIN_MODULE


def pytest_configure(config):
    """Say so when loaded without the timing plugin, which owns the decision."""
    if not config.pluginmanager.has_plugin(TIMING_PLUGIN_MODULE):
        log(GRAPH_LOG_TAG, "loaded without _timing_plugin: do_bench left untouched "
            "(load -p _timing_plugin; it decides whether graph capture applies)")
