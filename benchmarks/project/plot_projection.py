#!/usr/bin/env python3
"""plot_projection.py: dplab-project's figure, from the CSVs it wrote.

    python3 plot_projection.py projection.csv timeline.csv projection.png

  left   scaling efficiency (compute / step) against N, one line per algorithm
  right  the step at the largest N as a timeline, one row per algorithm: forward and
         backward, then every bucket's stages (ring, push, pull, ...) where the timeline put
         them: what sits under backward is hidden, what runs past it is exposed
Only the standard library and matplotlib (Debian: python3-matplotlib). dplab-project calls
this script itself and skips the plot, saying so, when matplotlib is missing.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

STAGE_COLOUR = {"forward": "tab:green", "backward": "tab:olive", "optimizer": "tab:gray"}
COMM_COLOURS = ["tab:blue", "tab:orange", "tab:purple", "tab:red", "tab:cyan", "tab:brown", "tab:pink", "navy"]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: plot_projection.py projection.csv timeline.csv out.png")
    rows, events = read_csv(sys.argv[1]), read_csv(sys.argv[2])
    algos = list(dict.fromkeys(r["algorithm"] for r in rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.5]})
    for a in algos:
        mine = [r for r in rows if r["algorithm"] == a]
        left.plot([int(r["N"]) for r in mine], [100 * float(r["efficiency"]) for r in mine], marker="o", label=a)
    left.set_xscale("log", base=2)
    left.set_ylim(0, 105)
    left.set_xlabel("devices N")
    left.set_ylabel("scaling efficiency % (compute / step)")
    left.grid(True, alpha=0.3)
    left.legend()
    left.set_title("projected efficiency (weak scaling)")

    stage_names = list(dict.fromkeys(e["what"] for e in events if e["what"] not in STAGE_COLOUR))
    colour = dict(STAGE_COLOUR)
    colour.update({s: COMM_COLOURS[i % len(COMM_COLOURS)] for i, s in enumerate(stage_names)})
    largest = events[0]["N"] if events else "?"
    labelled = set()
    for y, a in enumerate(algos):
        for e in (e for e in events if e["algorithm"] == a):
            start, end = float(e["start_ms"]), float(e["end_ms"])
            compute = e["what"] in STAGE_COLOUR
            # compute on the upper half of the row, communication on the lower half
            base = y + (0.05 if compute else -0.45)
            label = e["what"] if e["what"] not in labelled else None
            labelled.add(e["what"])
            right.broken_barh([(start, max(end - start, 1e-6))], (base, 0.4), facecolors=colour[e["what"]],
                              edgecolor="white", linewidth=0.3, label=label)
    right.set_yticks(range(len(algos)))
    right.set_yticklabels(algos)
    right.set_xlabel("ms from the step's start")
    right.set_title(f"one step at N = {largest}: compute above, each bucket's communication below")
    right.legend(fontsize=8, loc="lower right")
    right.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=110)
    print(f"plot: {sys.argv[3]}")


if __name__ == "__main__":
    main()
