"""The page's building blocks, shared by every page kind (zl/report/html.py) and the
sections other report modules draw (zl/report/retune.py): inline CSS and sorting script,
escaping, percent cells, tables, and `Page`, the sections collected in order with their charts.
"""

from __future__ import annotations

import html as _h
from typing import Dict, List, Optional, Sequence

from zl.report import charts

DEMO_TEXT = ("CPU DEMO: these runs ran in Triton's interpreter on the CPU against the bundled "
             "FlagGems-shaped test tree. The numbers mean nothing about any GPU or kernel; the page "
             "only shows what a real report looks like.")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#666;font-size:12px;word-break:break-all}
.demo{background:#ffe8a3;border:3px solid #e0a800;padding:12px 16px;font-weight:700;font-size:16px;margin:12px 0}
.warn{background:#fdecea;border-left:5px solid #c0392b;color:#a01d11;padding:8px 12px;margin:8px 0}
.flag{background:#f4ecf7;border-left:5px solid #8e44ad;padding:6px 12px;margin:6px 0}
.ok{background:#eaf7ef;border-left:5px solid #2a9d5c;padding:6px 12px;margin:6px 0}
.wrong{background:#c0392b;color:#fff;border:3px solid #7b1d12;padding:12px 16px;font-weight:700;font-size:16px;margin:12px 0}
td.mismatch{background:#fdecea;color:#a01d11;font-weight:700} td.match{color:#1e7b45}
table{border-collapse:collapse;margin:8px 0;font-size:13px} th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f3f3} table.sortable th{cursor:pointer} td.num{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#1e7b45} .down{color:#b03020} .chart svg{max-width:100%;height:auto}
.kpi{display:inline-block;margin:4px 18px 4px 0} .kpi b{font-size:18px}
pre.diff{background:#f7f7f7;border:1px solid #ddd;padding:6px 8px;font-size:12px;overflow-x:auto;margin:2px 0 8px}
"""

SORT_JS = """
document.querySelectorAll('table.sortable th').forEach(function(th){th.addEventListener('click',function(){
var t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th),
d=th.dataset.dir==='a'?'d':'a';th.dataset.dir=d;var rows=Array.prototype.slice.call(b.rows);
rows.sort(function(x,y){var p=x.cells[i].dataset.v||x.cells[i].textContent,q=y.cells[i].dataset.v||y.cells[i].textContent,
m=parseFloat(p),n=parseFloat(q),r=(!isNaN(m)&&!isNaN(n))?m-n:p.localeCompare(q);return d==='a'?r:-r;});
rows.forEach(function(r){b.appendChild(r);});});});
"""


def esc(x) -> str:
    return _h.escape("" if x is None else str(x))


def pct(v: Optional[float], signed: bool = True) -> str:
    if v is None:
        return "n/a"
    return f"{v:+.2f}%" if signed else f"{v:.2f}%"


def _cls(v: Optional[float]) -> str:
    return "" if v is None or v == 0 else ("up" if v > 0 else "down")


def table(headers: Sequence[str], rows: List[List], sortable: bool = False) -> str:
    """rows: cells are text, or (text, sort_value, css_class)."""
    cls = ' class="sortable"' if sortable else ""
    out = [f"<table{cls}><thead><tr>"
           + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for c in r:
            if isinstance(c, tuple):
                text, val, css = (list(c) + [None, None])[:3]
                attr = f' data-v="{esc(val)}"' if val is not None else ""
                cells.append(f"<td class=\"num {css or ''}\"{attr}>{esc(text)}</td>")
            else:
                cells.append(f"<td>{esc(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _numcell(v: Optional[float], signed: bool = True):
    return (pct(v, signed), "" if v is None else f"{v:.6g}", _cls(v) if signed else "")


class Page:
    """Sections collected in order; charts kept for --png."""

    def __init__(self, title: str, sub: str):
        self.title, self.sub = title, sub
        self.parts: List[str] = []
        self.figures: Dict[str, object] = {}

    def add(self, text: str) -> None:
        self.parts.append(text)

    def chart(self, name: str, fig) -> None:
        self.figures[name] = fig
        self.parts.append(f'<div class="chart" id="chart-{esc(name)}">{charts.to_svg(fig)}</div>')

    def render(self) -> str:
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body>"
                f"<h1>{esc(self.title)}</h1><div class=\"sub\">{esc(self.sub)}</div>"
                + "\n".join(self.parts) + f"<script>{SORT_JS}</script></body></html>\n")
