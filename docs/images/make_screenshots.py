"""Rebuild docs/images/report_*.png: each report page from committed real H200 logs
(tests/harness/report_fixtures.py), rendered by headless Chromium.

    python3 docs/images/make_screenshots.py [OUT_DIR]     # needs chromium and matplotlib

Screenshots are cut to the page's content and reduced to a 64-colour palette so they
stay small in the repository.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import batch_summary  # noqa: E402
from harness import report_fixtures as rf  # noqa: E402

# (name, window height) per page; the height covers the page, the crop removes the rest.
PAGES = (("ab", 1250), ("ab_rounds", 2400), ("screen", 900), ("batch", 1000))


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "images"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("make_screenshots.py: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        runs = rf.ab_pair(t / "ab")
        argv = {"ab": ["--ab", runs["before"], runs["after"], "--label", "softmax"],
                "ab_rounds": ["--ab-rounds", rf.rounds_root(t / "rounds"), "--label", "softmax"],
                "screen": ["--screen", rf.screen_root(t / "screen_root")],
                "batch": ["--batch", rf.batch_dir(t / "batch_root")]}
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
