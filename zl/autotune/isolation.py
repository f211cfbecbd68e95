"""Did ZL_ISOLATE_TUNER_CACHE=1 take effect?

FlagGems' sqlite tuner store is a singleton built at `import flag_gems` from
FLAGGEMS_DB_URL / FLAGGEMS_CACHE_DIR (FlagGems' own variables, read here as FlagGems
reads them). Set after that import, they change nothing, and a shared store hands
one side's winners to the other (mm: 945 -> 33 compiled variants).
"""

from __future__ import annotations

import sys
from typing import Iterable, List

from zl.childenv import inherited
from zl.flaggems import PACKAGES


def tuner_store_location() -> str:
    for pkg in PACKAGES:
        mod = sys.modules.get(f"{pkg}.utils.libentry")
        store = getattr(mod, "libcache", None) if mod is not None else None
        if store is None:
            continue
        loc = getattr(store, "db_url", None) or getattr(store, "path", None)
        if loc:
            return str(loc)
    return ""


def isolation_problems(isolate: bool, loaded_early: Iterable[str]) -> List[str]:
    """Why an isolated tuner cache was asked for but may not be in use; [] when fine."""
    if not isolate:
        return []
    early = list(loaded_early)
    problems = []
    if early:
        problems.append(f"{', '.join(early)} was imported before the zl_bench plugins loaded")
    env = inherited()   # what FlagGems in this process reads (zl.childenv set it for the run)
    private = env.get("FLAGGEMS_DB_URL", "").strip() or env.get("FLAGGEMS_CACHE_DIR", "").strip()
    if not private:
        problems.append("neither FLAGGEMS_DB_URL nor FLAGGEMS_CACHE_DIR is set")
    else:
        where = tuner_store_location()
        want = private[len("sqlite:///"):] if private.startswith("sqlite:///") else private
        if where and want not in where:
            problems.append(f"the tuner store is {where}, not the private {private}")
    return problems
