"""`pytest --help -p <plugin>` lists each zl plugin's options in the zl_bench group, and
two plugins may declare the option of a variable they share."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zl import options

REPO = Path(__file__).resolve().parent.parent

PLUGIN_OPTIONS = {
    "_ir_meta_plugin": ("--zl-enable-ir", "--zl-ttgir-dump-dir", "--zl-ir-levels"),
    "_device_setup_plugin": ("--zl-backend", "--zl-device", "--zl-device-share"),
    "_device_guard_plugin": ("--zl-backend", "--zl-device", "--zl-device-share"),
    "_seed_plugin": ("--zl-seed",),
    "_shape_inject_plugin": ("--zl-shape-file", "--zl-shape-mode", "--zl-dtype-fallback"),
    "_pretty_report_plugin": ("--zl-pretty-fold", "--zl-color"),
}


def _help(tmp_path, *plugins):
    args = [a for p in plugins for a in ("-p", p)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "OUT_DIR": ""}
    return subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_help_lists_every_plugin_option_in_the_zl_bench_group(tmp_path):
    proc = _help(tmp_path, *PLUGIN_OPTIONS)
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split(options.GROUP_DESCRIPTION, 1)[1]
    for flags in PLUGIN_OPTIONS.values():
        for flag in flags:
            assert flag in section, flag
    assert "[env ZL_IR_LEVELS; default 'ttgir']" in " ".join(section.split())


@pytest.mark.parametrize("plugin", sorted(PLUGIN_OPTIONS))
def test_each_plugin_alone_shows_its_options(tmp_path, plugin):
    proc = _help(tmp_path, plugin)
    assert proc.returncode == 0, proc.stderr
    assert options.GROUP_DESCRIPTION in proc.stdout
    assert all(flag in proc.stdout for flag in PLUGIN_OPTIONS[plugin])

