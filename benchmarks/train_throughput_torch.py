#!/usr/bin/env python3
"""train_throughput_torch.py: PyTorch's side of bench_train_throughput (train_throughput.cpp).

The same two models (the MLP 784-256-128-10 and the LeNet-style CNN of models/lenet.h,
layer for layer), the same batch of synthetic [64, 1, 28, 28] inputs, the same SGD
(lr 0.01, momentum 0.9) and the same step (zero_grad(set_to_none) -> forward ->
cross_entropy -> backward -> step), timed the same way: warm-up, then whole steps until
--min-time has passed, split into forward / backward / optimizer.
Run: python3 benchmarks/train_throughput_torch.py [--threads 1,all] [--csv torch.csv]
     [--dplab-csv dplab.csv]   # adds the column dplab samples/s / PyTorch samples/s
Paired rounds, for a noisy machine: --dplab-bin build/benchmarks/bench_train_throughput
--rounds 5 runs dplab (that binary, one model and thread count at a time) and then PyTorch on
the same model and thread count, straight after each other, five times over, and prints each
pair's ratio and the median and range per row. Two runs seconds apart see the same machine;
a whole table of one framework and then one of the other may not.
PyTorch runs with the malloc settings dplab makes for itself (cpu_backend.cpp), given to
glibc through its environment variables; --glibc-defaults runs it without them. Without
them every step maps its large buffers afresh and page-faults them in, which on this
project's VM made PyTorch's CNN swing 3x from run to run.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_mlp():
    # models/mlp.h: Sequential(Linear, ReLU, Linear, ReLU, Linear) after flattening.
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


class LeNet(nn.Module):
    # models/lenet.h: conv 5x5 1->16 pad 2, relu, pool 2, conv 5x5 16->32 pad 2, relu,
    # pool 2, flatten, fc 1568->10.
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


MODELS = {"mlp": make_mlp, "cnn": LeNet}

# dplab's mallopt calls (framework/backend/cpu/cpu_backend.cpp) as glibc environment variables:
# keep blocks up to 32 MiB on the heap, never trim it, one arena.
DPLAB_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                "MALLOC_ARENA_MAX": "1"}


def use_dplab_malloc():
    """glibc reads these variables at start-up only, so the script starts itself again."""
    if all(os.environ.get(k) == v for k, v in DPLAB_MALLOC.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **DPLAB_MALLOC})


def run(name, threads, batch, warmup, min_time, lr, momentum):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name]()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    gen = torch.Generator().manual_seed(1234)
    xs = [torch.randn(batch, 1, 28, 28, generator=gen) for _ in range(8)]
    ys = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(8)]
    steps, total, fwd, bwd, stp = 0, 0.0, 0.0, 0.0, 0.0
    i = 0
    while True:
        k = i % 8
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[k]), ys[k])
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        i += 1
        if i <= warmup:
            continue
        steps += 1
        fwd += t1 - t0
        bwd += t2 - t1
        stp += t3 - t2
        total += t3 - t0
        if total >= min_time and steps >= 5:
            break
    return dict(framework="pytorch", model=name, threads=threads, batch=batch, steps=steps,
                ms_per_step=1e3 * total / steps, forward_ms=1e3 * fwd / steps,
                backward_ms=1e3 * bwd / steps, step_ms=1e3 * stp / steps,
                samples_per_s=steps * batch / total)


def run_dplab(binary, name, threads, a):
    """dplab's samples/s for one model and thread count: one row of bench_train_throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.csv")
        subprocess.run([binary, "--models", name, "--threads", str(threads), "--csv", out,
                        "--batch-size", str(a.batch_size), "--min-time", str(a.min_time),
                        "--warmup", str(a.warmup), "--lr", str(a.lr), "--momentum", str(a.momentum)],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = [r for r in csv.DictReader(f) if r["device"].startswith("cpu")]
    return float(rows[0]["samples_per_s"])


def paired_rounds(a, threads, names):
    """dplab, then PyTorch, on the same row, a.rounds times; the ratio's median and range."""
    print(f"{'round':>5} {'model':<6} {'threads':>7} {'dplab samples/s':>16} "
          f"{'torch samples/s':>16} {'dplab/torch':>12}")
    ratios, rows = {}, []
    for k in range(1, a.rounds + 1):
        for t in threads:
            for name in names:
                ours = run_dplab(a.dplab_bin, name, t, a)
                theirs = run(name, t, a.batch_size, a.warmup, a.min_time, a.lr, a.momentum)
                ratio = ours / theirs["samples_per_s"]
                ratios.setdefault((name, t), []).append(ratio)
                print(f"{k:>5} {name:<6} {t:>7} {ours:>16.1f} {theirs['samples_per_s']:>16.1f} "
                      f"{ratio:>12.2f}", flush=True)
                rows.append(dict(round=k, model=name, threads=t, dplab_samples_per_s=ours,
                                 torch_samples_per_s=theirs["samples_per_s"], ratio=ratio))
    print(f"\n{'model':<6} {'threads':>7} {'rounds':>6} {'median dplab/torch':>19} {'range':>14}")
    for (name, t), r in ratios.items():
        print(f"{name:<6} {t:>7} {len(r):>6} {statistics.median(r):>19.2f} "
              f"{min(r):>6.2f}-{max(r):.2f}")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-time", type=float, default=3.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", default="1,all")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--csv", default="")
    p.add_argument("--dplab-csv", default="", help="bench_train_throughput's --csv, for ratios")
    p.add_argument("--glibc-defaults", action="store_true",
                   help="leave glibc's malloc as it is instead of dplab's settings")
    p.add_argument("--dplab-bin", default="",
                   help="bench_train_throughput: run it and PyTorch in paired rounds")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds (with --dplab-bin)")
    a = p.parse_args()
    if a.dplab_bin and not os.access(a.dplab_bin, os.X_OK):
        p.error(f"--dplab-bin {a.dplab_bin}: not an executable file (build it: "
                "ninja -C build benchmarks/bench_train_throughput)")
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    if not a.glibc_defaults:
        use_dplab_malloc()

    every = os.cpu_count() or 1
    threads = [every if t == "all" else int(t) for t in a.threads.split(",") if t]
    names = [m for m in ("mlp", "cnn") if m in a.models.split(",")]
    ref = {}
    if a.dplab_csv:
        with open(a.dplab_csv) as f:
            for r in csv.DictReader(f):
                if r.get("device", "cpu").startswith("cpu"):  # GPU rows have no PyTorch twin here
                    ref[(r["model"], int(r["threads"]))] = float(r["samples_per_s"])

    print(f"PyTorch {torch.__version__} training throughput: batch {a.batch_size}, SGD lr {a.lr} "
          f"momentum {a.momentum}, synthetic [B,1,28,28], malloc: "
          f"{'glibc defaults' if a.glibc_defaults else 'dplab settings'}")
    if a.dplab_bin:
        rows = paired_rounds(a, threads, names)
    else:
        rows = table(a, threads, names, ref)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {a.csv}")


def table(a, threads, names, ref):
    """PyTorch alone, one row per model and thread count (ratios from dplab's CSV if given)."""
    print(f"{'model':<6} {'threads':>7} {'steps':>7} {'ms/step':>10} {'fwd ms':>9} {'bwd ms':>9} "
          f"{'step ms':>9} {'samples/s':>12}" + (f" {'dplab/torch':>12}" if ref else ""))
    rows = []
    for t in threads:
        for name in names:
            r = run(name, t, a.batch_size, a.warmup, a.min_time, a.lr, a.momentum)
            r["malloc"] = "glibc" if a.glibc_defaults else "dplab"
            line = (f"{name:<6} {t:>7} {r['steps']:>7} {r['ms_per_step']:>10.3f} "
                    f"{r['forward_ms']:>9.3f} {r['backward_ms']:>9.3f} {r['step_ms']:>9.3f} "
                    f"{r['samples_per_s']:>12.1f}")
            if (name, t) in ref:
                line += f" {ref[(name, t)] / r['samples_per_s']:>12.2f}"
            print(line, flush=True)
            rows.append(r)
    return rows


if __name__ == "__main__":
    main()
