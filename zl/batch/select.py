"""Which cases a batch runs: `--all`, `--ops NAME ...`, `--ops-file`, `--repo`, ops/dismiss.txt.

A name is `[repo:]run_name` or `[repo:]op`; the repo defaults to main. An op that several
files define must be written `<op>@<op_file>`; an unknown name is an error that lists the
closest names (difflib), never a silently smaller batch.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

from zl.batch.inventory import Entry


class SelectionError(ValueError):
    """A name, ops file or dismiss file that does not resolve against the inventory."""


def split_name(token: str) -> Tuple[str, str]:
    repo, sep, name = token.strip().partition(":")
    return (repo, name) if sep else ("main", repo)


def _read_text(path: Path, what: str) -> str:
    """A names file's text; one that is missing, unreadable or not UTF-8 is a SelectionError
    naming it (exit 2), never an empty list."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SelectionError(f"cannot read {what} {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SelectionError(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_names_file(path: Path) -> List[str]:
    """Names one per line (or space separated); `#` starts a comment."""
    out: List[str] = []
    for line in _read_text(path, "ops file").splitlines():
        out.extend(line.split("#", 1)[0].split())
    return out


def read_dismiss(path: Path) -> Dict[Tuple[str, str], str]:
    """(repo, name) -> reason. Each line `[repo:]name  reason...`; a line without a reason
    is an error: a dismissed operator nobody can explain is a hole in the screen. A missing
    file is an error too (as a missing --ops-file is): a typo must not dismiss nothing."""
    out: Dict[Tuple[str, str], str] = {}
    for no, line in enumerate(_read_text(path, "dismiss file").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        reason = parts[1].lstrip("#- ").strip() if len(parts) > 1 else ""
        if not reason:
            raise SelectionError(f"{path}:{no}: '{parts[0]}' has no reason (write `name  reason`)")
        out[split_name(parts[0])] = reason
    return out


class Selector:
    def __init__(self, inventories: Dict[str, Sequence[Entry]]):
        self.inv = {repo: list(entries) for repo, entries in inventories.items()}
        self.by_run = {(e.repo, e.run_name): e for es in self.inv.values() for e in es}
        self.by_op: Dict[Tuple[str, str], List[Entry]] = {}
        for es in self.inv.values():
            for e in es:
                self.by_op.setdefault((e.repo, e.op), []).append(e)

    def resolve(self, token: str) -> Entry:
        repo, name = split_name(token)
        if repo not in self.inv:
            known = ", ".join(sorted(self.inv)) or "none"
            raise SelectionError(f"'{token}': no inventory for repo '{repo}' (loaded: {known}; "
                                 "vllm needs FLAGGEMS_VLLM_DIR)")
        hit = self.by_run.get((repo, name))
        if hit is not None:
            return hit
        same_op = self.by_op.get((repo, name), [])
        if len(same_op) == 1:
            return same_op[0]
        if same_op:
            raise SelectionError(f"'{token}' is defined in {len(same_op)} files; use one of: "
                                 + ", ".join(e.run_name for e in same_op))
        pool = sorted({e.run_name for e in self.inv[repo]} | {e.op for e in self.inv[repo]})
        close = difflib.get_close_matches(name, pool, n=5, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise SelectionError(f"unknown operator '{token}' in repo {repo}{hint}")

    def select(self, names: Iterable[str] = (), all_ops: bool = False,
               repos: Sequence[str] = (), dismiss: Dict[Tuple[str, str], str] = None,
               include_skipped: bool = False) -> Tuple[List[Entry], List[str]]:
        """(cases in order without duplicates, notes on what --all left out)."""
        out: List[Entry] = []
        seen = set()
        notes: List[str] = []
        errors: List[str] = []
        for token in names:
            try:
                e = self.resolve(token)
            except SelectionError as exc:
                errors.append(str(exc))
                continue
            if (e.repo, e.run_name) not in seen:
                seen.add((e.repo, e.run_name))
                out.append(e)
        if errors:
            raise SelectionError("\n".join(errors))
        if all_ops:
            dismiss = dismiss or {}
            dismissed = {(r, self.resolve(f"{r}:{n}").run_name) for (r, n) in dismiss
                         if r in self.inv and self._known(r, n)}
            unknown = [f"{r}:{n}" for (r, n) in dismiss if r in self.inv and not self._known(r, n)]
            if unknown:
                notes.append(f"dismiss.txt names not in this inventory: {', '.join(unknown)}")
            skipped = 0
            for repo in (repos or sorted(self.inv)):
                for e in self.inv.get(repo, []):
                    if (e.repo, e.run_name) in dismissed:
                        continue
                    if e.marked_skip == "1" and not include_skipped:
                        skipped += 1
                        continue
                    if (e.repo, e.run_name) not in seen:
                        seen.add((e.repo, e.run_name))
                        out.append(e)
            notes.append(f"--all left out {skipped} marked skip and {len(dismissed)} dismissed")
        return out, notes

    def _known(self, repo: str, name: str) -> bool:
        try:
            self.resolve(f"{repo}:{name}")
            return True
        except SelectionError:
            return False
