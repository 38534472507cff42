#!/usr/bin/env python3
"""train_throughput_torch_gpu.py: dplab and PyTorch training the same models on the same GPU.

The GPU twin of train_throughput_torch.py, whose models, batches and recipes it imports: the
MLP 784-256-128-10 and the LeNet-style CNN, the first --limit Fashion-MNIST training images in
order, SGD momentum 0.9 at the tutorials' lr (0.1 MLP, 0.05 CNN), batch 64. The batches are on
the GPU before the clock starts (as bench_train_throughput --device cuda puts them), and both
sides wait for the GPU at each phase boundary (forward, backward, optimizer), so the phases
are timed alike. Paired rounds: dplab (`bench_train_throughput --device cuda --gpu-only`, one
model at a time) and PyTorch (a fresh process per row) on the same model straight after each
other, dplab first in odd rounds and PyTorch first in even ones; each pair's ratio, then the
median and range per model.
Run: python3 benchmarks/train_throughput_torch_gpu.py --dplab-bin build/benchmarks/bench_train_throughput
     [--rounds 3] [--models mlp,cnn] [--csv gpu_torch.csv]
Read next: train_throughput_torch.py (the CPU comparison and its rules), train_throughput.cpp.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_throughput_torch import MODELS, RECIPE_LR, fashion_mnist_batches, write_csv  # noqa: E402


def run(name, batch, warmup, min_time, lr, momentum, limit):
    """One PyTorch row on cuda:0, in this process (the child of torch_row)."""
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    model = MODELS[name]().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    xs, ys = fashion_mnist_batches(batch, limit)
    xs, ys = [x.to(dev) for x in xs], [y.to(dev) for y in ys]
    sync = torch.cuda.synchronize
    steps, total, fwd, bwd, stp, i = 0, 0.0, 0.0, 0.0, 0.0, 0
    while True:
        k = i % len(xs)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[k]), ys[k])
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        opt.step()
        sync()
        t3 = time.perf_counter()
        i += 1
        if i <= warmup:
            continue
        steps += 1
        fwd, bwd, stp, total = fwd + t1 - t0, bwd + t2 - t1, stp + t3 - t2, total + t3 - t0
        if total >= min_time and steps >= 5:
            break
    return dict(model=name, steps=steps, ms_per_step=1e3 * total / steps,
                forward_ms=1e3 * fwd / steps, backward_ms=1e3 * bwd / steps,
                step_ms=1e3 * stp / steps, samples_per_s=steps * batch / total)


def lr_of(a, name):
    return a.lr if a.lr > 0 else RECIPE_LR[name]


def common_args(a, name):
    return ["--batch-size", str(a.batch_size), "--warmup", str(a.warmup), "--min-time",
            str(a.min_time), "--lr", str(lr_of(a, name)), "--momentum", str(a.momentum),
            "--limit", str(a.limit)]


def torch_row(a, name):
    """One row in a fresh Python process, as a user's run would be."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-row", name] +
                         common_args(a, name), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def dplab_row(a, name):
    """dplab's GPU row for one model: bench_train_throughput --device cuda --gpu-only."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.csv")
        subprocess.run([a.dplab_bin, "--models", name, "--device", "cuda", "--gpu-only",
                        "--csv", out, "--data", "fashion-mnist"] + common_args(a, name),
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = [r for r in csv.DictReader(f) if r["device"].startswith("cuda")]
    if not rows:
        sys.exit(f"{a.dplab_bin} wrote no GPU row for {name}: does it see a GPU?")
    r = rows[0]
    return {k: float(r[k]) for k in ("ms_per_step", "forward_ms", "backward_ms", "step_ms",
                                     "samples_per_s")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dplab-bin", default="", help="bench_train_throughput (built with CUDA)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--min-time", type=float, default=2.0)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--limit", type=int, default=12800)
    p.add_argument("--csv", default="")
    p.add_argument("--child-row", metavar="MODEL", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child_row:
        print(json.dumps(run(a.child_row, a.batch_size, a.warmup, a.min_time,
                             lr_of(a, a.child_row), a.momentum, a.limit)))
        return
    if not os.access(a.dplab_bin, os.X_OK):
        p.error(f"--dplab-bin '{a.dplab_bin}': not an executable file (build it: ninja -C build "
                "benchmarks/bench_train_throughput)")
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no CUDA GPU here: nothing to compare")
    names = [m for m in ("mlp", "cnn") if m in a.models.split(",")]
    gpu = torch.cuda.get_device_name(0)
    print(f"dplab vs PyTorch {torch.__version__} on {gpu}: batch {a.batch_size}, SGD momentum "
          f"{a.momentum}, Fashion-MNIST (the first {a.limit} images), paired rounds, phases "
          "synchronised on both sides")
    print(f"{'round':>5} {'model':<6} {'dplab ms/step':>14} {'torch ms/step':>14} "
          f"{'dplab/torch samples/s':>22}")
    rows, ratios = [], {}
    for k in range(1, a.rounds + 1):
        for name in names:
            if k % 2 == 1:
                ours, theirs = dplab_row(a, name), torch_row(a, name)
            else:
                theirs = torch_row(a, name)
                ours = dplab_row(a, name)
            ratio = ours["samples_per_s"] / theirs["samples_per_s"]
            ratios.setdefault(name, []).append(ratio)
            print(f"{k:>5} {name:<6} {ours['ms_per_step']:>14.3f} {theirs['ms_per_step']:>14.3f} "
                  f"{ratio:>22.2f}", flush=True)
            rows.append(dict(round=k, model=name, gpu=gpu, torch=torch.__version__,
                             **{f"dplab_{key}": v for key, v in ours.items()},
                             **{f"torch_{key}": theirs[key] for key in ours}, ratio=ratio))
    print(f"\n{'model':<6} {'rounds':>6} {'median dplab/torch':>19} {'range':>12}")
    for name, r in ratios.items():
        print(f"{name:<6} {len(r):>6} {statistics.median(r):>19.2f} {min(r):>6.2f}-{max(r):.2f}")
    if a.csv:
        write_csv(a.csv, rows)


if __name__ == "__main__":
    main()
