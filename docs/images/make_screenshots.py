"""Rebuild docs/images/report_*.png: each report page from committed real H200 results,
rendered by headless Chromium.

    python3 docs/images/make_screenshots.py [OUT_DIR]     # needs chromium and matplotlib

Sources (docs/validation/reports.md says where each was measured):
  (all in docs/validation/raw/reports.tar.xz, `report_pages/`, unpacked into a temporary folder)
  ab         report_pages/demo_softmax/{before,after}  demo.sh's real softmax
             record/replay ({before,after}: run.log, identity, IR fingerprints, results)
  ab_rounds  tests/fixtures/runlogs/h200/rounds.tar.xz: softmax_rounds/  4 rounds x 2 sides (the
             rounds kept no run_identity.json; tests/harness/report_fixtures.py gives them
             screen.tsv's caliber)
  screen     report_pages/aa_screen.tsv  an A/A screen (no cell run dirs kept)
  batch      report_pages/batch/  run_batch.py's real 8-case call (2 ran)

Screenshots are cut to the page's content and reduced to a 64-colour palette so they
stay small in the repository.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import batch_summary  # noqa: E402
from harness import report_fixtures as rf  # noqa: E402

PAGES_ARCHIVE = REPO / "docs" / "validation" / "raw" / "reports.tar.xz"
# Set by main() once the archive is unpacked: report_pages/ in a temporary folder.
PAGES_DIR = Path("report_pages")

# (name, window height) per page; the height covers the page, the crop removes the rest.
PAGES = (("ab", 1250), ("ab_rounds", 2250), ("screen", 900), ("batch", 1000))


def screen_root(root: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copy(PAGES_DIR / "aa_screen.tsv", root / "screen.tsv")
    return root


def batch_dir(root: Path) -> Path:
    """The committed batch with its run dirs where the report looks for them: ops_status.csv's
    out_dir named the device machine's paths (/root/out/...), so it is pointed at the copies."""
    root.mkdir(parents=True)
    batch = PAGES_DIR / "batch"
    with open(batch / "ops_status.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        run = root / r["repo"] / (r.get("run_name") or r["op"])
        if (batch / "runs" / r["op"]).is_dir():
            shutil.copytree(batch / "runs" / r["op"], run)
        r["out_dir"] = str(run)
    with open(root / "ops_status.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Rebuild docs/images/report_*.png: each report page (batch_summary.py --html) "
                    "from the committed real H200 results, rendered by headless Chromium. "
                    "Exit codes: 0 written; 1 a page could not be built; 2 usage, or no chromium.")
    ap.add_argument("out_dir", nargs="?", type=Path, default=REPO / "docs" / "images",
                    help="where report_{ab,ab_rounds,screen,batch}.png go (default: docs/images)")
    out = ap.parse_args(argv).out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("make_screenshots.py: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        with tarfile.open(PAGES_ARCHIVE) as tar:
            tar.extractall(t, filter="data")
        # The A/B page names its run logs as given: relative, not this machine's temp path.
        os.chdir(PAGES_DIR.parent if PAGES_DIR.is_absolute() else t)
        demo = PAGES_DIR / "demo_softmax"
        argv = {"ab": ["--ab", demo / "before", demo / "after", "--label", "softmax (H200 demo)"],
                "ab_rounds": ["--ab-rounds", rf.rounds_root(t / "rounds"), "--label", "softmax"],
                "screen": ["--screen", screen_root(t / "aa_screen")],
                "batch": ["--batch", batch_dir(t / "h200_batch")]}
        for name, height in PAGES:
            html, raw = t / f"{name}.html", t / f"{name}.raw.png"
            if batch_summary.main([str(a) for a in argv[name]] + ["--html", str(html)]) != 0:
                return 1
            subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                            "--hide-scrollbars", f"--window-size=1150,{height}",
                            f"--screenshot={raw}", html.as_uri()], capture_output=True, timeout=120)
            img = Image.open(raw).convert("RGB")
            box = ImageChops.difference(img, Image.new("RGB", img.size, "white")).getbbox()
            if box:
                img = img.crop((0, 0, img.width, min(img.height, box[3] + 24)))
            dest = out / f"report_{name}.png"
            img.quantize(colors=64).save(dest, optimize=True)
            print(f"{dest} {dest.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
