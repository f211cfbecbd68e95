#!/usr/bin/env python3
"""Plan which device repeats which screened operator, by measured time (campaign.sh uses it).

Only rows whose verdict is in --verdict are planned (a comma list; IR_CHANGED, the earlier
screens' one code verdict, matches every IR_CHANGED@<level>, as does IR_CHANGED@*; default
IR_CHANGED,BINARY_CHANGED; "" = every row; a word that names no verdict exits 2).
--extra adds unscreened OPS words to the least loaded device afterwards (no weight known).

Examples:
  python partition.py --screen runs/ab_rlc_X/screen.tsv --devices 0,1,2,3 [--rounds 6]
  python partition.py --screen ... --devices 0,1 --extra "topk:topk" --format shell

Outputs:
  On stdout. text (also spelled human): the plan, critical path, even share, imbalance, and
  whether the heaviest operator alone sets the floor. shell: one line per device
  `DEVICE<TAB>OPS<TAB>PAIR_SECONDS<TAB>EST_SECONDS`.

Exit codes:
  0  planned
  2  bad arguments (a device id other than letters, digits, _ . : -), unreadable screen or
     unknown verdict word
  3  nothing to plan
"""

from __future__ import annotations

import re
import sys

from zl import cli_help
from zl.backends import parse_device_list
from zl.batch import partition as pt

DEVICE_ID = re.compile(r"[A-Za-z0-9_.:-]+")
MAX_ROUNDS = 999_999_999


def main(argv=None) -> int:
    p = cli_help.parser(__doc__, prog="partition.py")
    p.add_argument("--screen", required=True, help="screen.tsv of ab_rlc_test.sh")
    p.add_argument("--devices", required=True, help="comma separated device ids")
    p.add_argument("--verdict", default=pt.REPEAT_VERDICTS,
                   help='comma list of verdicts to plan; a word also matches its @level forms, so '
                        'IR_CHANGED is every IR_CHANGED@<level> ("" = all)')
    p.add_argument("--rounds", type=int, default=6, help="rounds per operator (estimate = pair x rounds)")
    p.add_argument("--extra", default="", help="space separated OPS words to append")
    # `human` is text's name in the first partition.py; scripts written for it keep working.
    p.add_argument("--format", choices=("text", "human", "shell"), default="text",
                   help="text (also human) for people, shell for campaign.sh")
    args = p.parse_args(argv)
    devices = parse_device_list(args.devices)
    if not devices or len(set(devices)) != len(devices):
        print(f"!!! [partition] --devices needs distinct device ids (got {args.devices!r})", file=sys.stderr)
        return 2
    # A device id becomes a visibility variable's value and a directory name in campaign.sh:
    # plain tokens only ("0 1" is not two devices; "a;b" is no device).
    odd = [d for d in devices if not DEVICE_ID.fullmatch(d)]
    if odd:
        print(f"!!! [partition] --devices: not a device id: {', '.join(map(repr, odd))} "
              "(letters, digits, _ . : - only; separate ids with commas)", file=sys.stderr)
        return 2
    if not 1 <= args.rounds <= MAX_ROUNDS:   # campaign.sh's ROUNDS bound (9 digits)
        print(f"!!! [partition] --rounds must be 1..{MAX_ROUNDS} (got {args.rounds})", file=sys.stderr)
        return 2
    try:
        rows, warnings = pt.read_screen(args.screen)
    except pt.PartitionError as exc:
        print(f"!!! [partition] {exc}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"!!! [partition] {w}", file=sys.stderr)
    unknown = pt.unknown_verdict_words(args.verdict, rows)
    if unknown:
        print(f"!!! [partition] --verdict {','.join(unknown)} names no verdict: screen verdicts are "
              f"{', '.join(pt.VERDICT_WORDS)} (IR_CHANGED: every IR_CHANGED@<level>)", file=sys.stderr)
        return 2
    chosen = [r for r in rows if pt.verdict_selected(r.verdict, args.verdict)]
    left = [f"{r.op}({r.verdict})" for r in rows if r not in chosen]
    extra = args.extra.split()
    if not chosen and not extra:
        print(f"!!! [partition] no row with verdict {args.verdict!r} in {args.screen}", file=sys.stderr)
        return 3
    assignment = pt.plan([(r.ops_entry, r.weight) for r in chosen], devices)
    load = pt.loads(assignment)
    if extra:
        lightest = min(devices, key=lambda d: (load[d], devices.index(d)))
        assignment[lightest].extend((e, 0.0) for e in extra)
    if args.format == "shell":
        for d in devices:
            ops = " ".join(name for name, _ in assignment[d])
            print(f"{d}\t{ops}\t{load[d]:.0f}\t{load[d] * args.rounds:.0f}")
        return 0
    st = pt.stats(assignment)
    r = args.rounds
    print(f"[partition] {len(chosen)} operator(s) with verdict {args.verdict or '<any>'} over "
          f"{len(devices)} device(s), {r} round(s); estimate = pair seconds x rounds")
    for d in devices:
        names = " ".join(n for n, _ in assignment[d]) or "-"
        print(f"  device {d}: {load[d] * r / 60:8.1f} min  {names}")
    print(f"[partition] critical path {st.critical_path * r / 60:.1f} min, even share "
          f"{st.even_share * r / 60:.1f} min, imbalance {st.imbalance:.2f}")
    if st.heaviest_sets_floor:
        print(f"[partition] the heaviest operator alone sets the floor: {st.heaviest * r / 60:.1f} min "
              "> the even share; more devices do not shorten this campaign")
    if extra:
        print(f"[partition] --extra (unmeasured) on the least loaded device: {' '.join(extra)}")
    if left:
        print(f"[partition] not planned ({len(left)}): {' '.join(left[:20])}"
              + (" ..." if len(left) > 20 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
