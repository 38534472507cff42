#!/usr/bin/env python3
"""24_tiny_gpt_plot.py: loss.png from the loss.csv tutorial 24 wrote.

    python3 tutorials/24_tiny_gpt_plot.py results/24_tiny_gpt

Training loss per step (thin) and validation loss at each evaluation (dots) against the
step, with the lr on a second axis. Only the standard library and matplotlib (Debian:
python3-matplotlib); exits 1 without matplotlib, and the tutorial then says there is no plot.
"""
import csv
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit(1)
matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main(out_dir):
    with open(os.path.join(out_dir, "loss.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    steps = [int(r["step"]) for r in rows]
    train = [float(r["train_loss"]) for r in rows]
    lr = [float(r["lr"]) for r in rows]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, color="tab:blue", alpha=0.5, linewidth=0.8, label="train (one batch)")
    ax.plot([s for s, _ in val], [v for _, v in val], "o-", color="tab:red", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy (nats per byte)")
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(steps, lr, color="tab:gray", linestyle="--", linewidth=0.8, label="lr")
    ax2.set_ylabel("learning rate")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right")
    ax.set_title("Tutorial 24: a tiny byte-level GPT")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "loss.png"), dpi=120)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/24_tiny_gpt")
