"""Which cells of an A/B root belong to one campaign.

A second ab_repeat.sh campaign started in the root of a finished one used to be counted
together with it (ROUNDS=2 reported "3 rounds", one of them the old campaign's +10 %).
Every cell's run_identity.json carries the `campaign_id` its driver wrote; a report uses
the cells of one campaign only and says which cells it used and which it ignored.

Rules:
- no cell has an id (runs from before campaign ids): all cells are one campaign;
- some cells have an id and some do not: refused (MixedCampaigns), since nothing tells
  which campaign the id-less cells belong to;
- several ids: the one asked for, else the newest (its latest run.log is the most recent
  one: the campaign the user just ran), ties broken by the larger number of cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl.runlog.caliber import read_identity

Cell = Tuple[int, str]


class MixedCampaigns(ValueError):
    """Cells with and without a campaign id in one root."""


class UnknownCampaign(ValueError):
    """The campaign asked for has no cell in this root."""


@dataclass
class CampaignChoice:
    campaign_id: Optional[str]
    used: Dict[Cell, Path]
    ignored: Dict[Cell, str] = field(default_factory=dict)   # cell -> its campaign id

    def describe(self) -> List[str]:
        """Lines saying which cells were used and which were ignored."""
        used = " ".join(cell_name(c) for c in sorted(self.used))
        who = f"campaign {self.campaign_id}" if self.campaign_id else \
            "no campaign_id in any cell (runs from before campaign ids): one campaign assumed"
        lines = [f"{who}; cells used: {used}"]
        by_id: Dict[str, List[str]] = {}
        for c, cid in sorted(self.ignored.items()):
            by_id.setdefault(cid, []).append(cell_name(c))
        lines += [f"IGNORED cells of campaign {cid}: {' '.join(names)}"
                  for cid, names in sorted(by_id.items())]
        return lines


def cell_name(cell: Cell) -> str:
    return f"r{cell[0]}_{cell[1]}"


def campaign_of(cell_dir: Path) -> Optional[str]:
    return campaign_id(read_identity(cell_dir))


def campaign_id(identity: Optional[Dict]) -> Optional[str]:
    """The campaign a cell's identity names; None when it names none."""
    value = (identity or {}).get("campaign_id")
    return str(value).strip() or None if value is not None else None


def _latest_log(dirs: List[Path]) -> float:
    stamps = []
    for d in dirs:
        try:
            stamps.append((d / "run.log").stat().st_mtime)
        except OSError:
            continue
    return max(stamps, default=0.0)


def select_campaign(cells: Dict[Cell, Path], wanted: Optional[str] = None,
                    identities: Optional[Dict[Cell, Optional[Dict]]] = None) -> CampaignChoice:
    """`identities`: each cell's identity as a report already read it (else read here)."""
    ids = {c: campaign_of(d) if identities is None else campaign_id(identities[c])
           for c, d in cells.items()}
    known = sorted({i for i in ids.values() if i})
    if not known:
        if wanted:
            raise UnknownCampaign(f"no cell has a campaign_id, so none is {wanted!r}")
        return CampaignChoice(None, dict(cells))
    anonymous = sorted(c for c, i in ids.items() if not i)
    if anonymous:
        raise MixedCampaigns(
            f"cells {' '.join(cell_name(c) for c in anonymous)} have no campaign_id while "
            f"others belong to {', '.join(known)}: nothing tells which campaign they are part "
            "of; move them (or the other campaign) out of this root")
    if wanted is None:
        members = {cid: [d for c, d in cells.items() if ids[c] == cid] for cid in known}
        wanted = max(known, key=lambda cid: (_latest_log(members[cid]), len(members[cid]), cid))
    elif wanted not in known:
        raise UnknownCampaign(f"campaign {wanted!r} has no cell here (found: {', '.join(known)})")
    return CampaignChoice(wanted, {c: d for c, d in cells.items() if ids[c] == wanted},
                          {c: i for c, i in ids.items() if i != wanted})
