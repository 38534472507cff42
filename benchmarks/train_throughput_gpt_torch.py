#!/usr/bin/env python3
"""train_throughput_gpt_torch.py: PyTorch's side of bench_train_gpt (train_throughput_gpt.cpp).

The same character-level GPT as models/gpt.h, layer for layer, written as nanoGPT's model.py
(token + position embeddings, pre-LN blocks with one fused qkv Linear, causal softmax attention
written plainly: q k^T / sqrt(D), masked to -inf above the diagonal, softmax, times v (PyTorch
1.13 has no F.scaled_dot_product_attention), GELU (tanh), final LayerNorm, head tied to the token
embedding, GPT-2's initialisation), the same recipe (n_layer 4, n_head 4, n_embd 128, block 64,
batch 16, vocabulary 256, dropout 0; AdamW lr 1e-3, betas (0.9, 0.99), eps 1e-8, weight decay
0.1 on the >= 2-D parameters only, torch.optim.AdamW's default implementation; gradients
clipped to norm 1.0) and the same kind of batches: 32 random windows of the first 90% of the
Jargon File's bytes (datasets/text_corpus.h), drawn with torch.Generator(--seed) before the
clock starts and cycled. (dplab draws its windows with its own generator: the same text, shapes
and statistics, not the same bytes.) The step is zero_grad(set_to_none) -> forward -> loss ->
backward -> clip_grad_norm_ -> step, timed as dplab's: warm-up, then whole steps until
--min-time, split into forward / backward / clip + optimizer.

Every row runs in a fresh Python process with OMP_NUM_THREADS set and dplab's malloc settings
(train_throughput_torch.py's run_row, whose BLAS check and CPU reading this script reuses).
Run: /usr/bin/python3 benchmarks/train_throughput_gpt_torch.py [--threads 1,2]
Paired rounds (docs/benchmarks.md): --dplab-bin build/benchmarks/bench_train_gpt --rounds 3
runs dplab and PyTorch on the same row straight after each other (dplab first in odd rounds,
PyTorch first in even ones) and prints each pair's tokens/s ratio, then the median and range.
"""
import argparse
import csv
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from train_throughput_torch import DPLAB_MALLOC, blas_verdict, cpu_info, loaded_blas, write_csv

JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = F.softmax(att, dim=-1) @ v  # [B, H, T, D]
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for m in self.modules():  # GPT-2's initialisation, as models/gpt.cpp
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def loss(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def jargon_batches(path, batch, block, count, seed):
    """`count` batches of `batch` random windows of the training split (the first 90% of the
    bytes, as TextCorpus splits): x = bytes[i, i + T), y = bytes[i + 1, i + T + 1)."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    train = torch.frombuffer(bytearray(data[:len(data) - math.floor(0.1 * len(data))]),
                             dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        starts = torch.randint(0, len(train) - block, (batch,), generator=gen)
        offsets = starts[:, None] + torch.arange(block)[None, :]
        out.append((train[offsets].clone(), train[offsets + 1].clone()))
    return out


def run(a, threads):
    """One row, in this process (the child of run_row)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(256, a.block, a.n_layer, a.n_head, a.n_embd)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    data = jargon_batches(a.text, a.batch_size, a.block, 32, a.seed)
    steps, total, fwd, bwd, stp, i = 0, 0.0, 0.0, 0.0, 0.0, 0
    while True:
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        i += 1
        if i <= a.warmup:
            continue
        steps += 1
        fwd, bwd, stp, total = fwd + t1 - t0, bwd + t2 - t1, stp + t3 - t2, total + t3 - t0
        if total >= a.min_time and steps >= 5:
            break
    blas, _ = blas_verdict(loaded_blas())
    return dict(framework="pytorch", model="gpt", threads=threads, n_layer=a.n_layer,
                n_head=a.n_head, n_embd=a.n_embd, block=a.block, batch=a.batch_size, steps=steps,
                ms_per_step=1e3 * total / steps, forward_ms=1e3 * fwd / steps,
                backward_ms=1e3 * bwd / steps, step_ms=1e3 * stp / steps,
                tokens_per_s=steps * a.batch_size * a.block / total, loss=loss.item(), blas=blas,
                torch_threads=torch.get_num_threads())


def shape_args(a):
    return ["--n-layer", str(a.n_layer), "--n-head", str(a.n_head), "--n-embd", str(a.n_embd),
            "--block", str(a.block), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
            "--min-time", str(a.min_time), "--warmup", str(a.warmup), "--seed", str(a.seed),
            "--text", a.text]


def run_row(a, threads):
    """One PyTorch row in a fresh Python process (OMP_NUM_THREADS, dplab's malloc settings)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           **DPLAB_MALLOC}
    args = [sys.executable, os.path.abspath(__file__), "--child-row", str(threads)] + shape_args(a)
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_dplab(a, threads):
    """dplab's row of bench_train_gpt for one thread count, in its own process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.csv")
        subprocess.run([a.dplab_bin, "--threads", str(threads), "--csv", out] + shape_args(a),
                       check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        with open(out) as f:
            return next(csv.DictReader(f))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-time", type=float, default=3.0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--text", default=JARGON, help="plain or gzip text (default: the Jargon File)")
    p.add_argument("--dplab-bin", default="", help="bench_train_gpt: run it and PyTorch in pairs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--csv", default="")
    p.add_argument("--child-row", metavar="THREADS", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child_row:
        print(json.dumps(run(a, int(a.child_row))))
        return
    if a.dplab_bin and not os.access(a.dplab_bin, os.X_OK):
        p.error(f"--dplab-bin {a.dplab_bin}: not an executable (ninja -C build "
                "benchmarks/bench_train_gpt)")
    threads = [int(t) for t in a.threads.split(",") if t]
    torch.randn(64, 128) @ torch.randn(128, 128)
    blas_paths = loaded_blas()
    blas, warning = blas_verdict(blas_paths)
    model, ext = cpu_info()
    print(f"PyTorch {torch.__version__} GPT training throughput: n_layer {a.n_layer}, n_head "
          f"{a.n_head}, n_embd {a.n_embd}, block {a.block}, batch {a.batch_size}, vocab 256; "
          f"AdamW lr {a.lr} betas (0.9, 0.99) wd 0.1 (matrices), clip 1.0\nCPU: {model} ({ext}); "
          f"BLAS: {blas} ({', '.join(blas_paths) or 'none mapped'}); malloc: dplab settings; "
          "one process per row with OMP_NUM_THREADS set")
    if warning:
        print(warning)
    rows, ratios = [], {}
    if not a.dplab_bin:
        print(f"{'threads':>7} {'steps':>7} {'ms/step':>10} {'fwd ms':>9} {'bwd ms':>9} "
              f"{'step ms':>9} {'tokens/s':>12} {'loss':>8}")
        for t in threads:
            r = run_row(a, t)
            print(f"{t:>7} {r['steps']:>7} {r['ms_per_step']:>10.3f} {r['forward_ms']:>9.3f} "
                  f"{r['backward_ms']:>9.3f} {r['step_ms']:>9.3f} {r['tokens_per_s']:>12.1f} "
                  f"{r['loss']:>8.4f}", flush=True)
            rows.append(r)
    else:
        print(f"{'round':>5} {'threads':>7} {'dplab tokens/s':>15} {'torch tokens/s':>15} "
              f"{'dplab/torch':>12}   (ms/step fwd/bwd/step: dplab | torch)")
        for k in range(1, a.rounds + 1):
            for t in threads:
                if k % 2 == 1:
                    ours = run_dplab(a, t)
                    theirs = run_row(a, t)
                else:
                    theirs = run_row(a, t)
                    ours = run_dplab(a, t)
                ratio = float(ours["tokens_per_s"]) / theirs["tokens_per_s"]
                ratios.setdefault(t, []).append(ratio)
                print(f"{k:>5} {t:>7} {float(ours['tokens_per_s']):>15.1f} "
                      f"{theirs['tokens_per_s']:>15.1f} {ratio:>12.2f}   "
                      f"{float(ours['forward_ms']):.1f}/{float(ours['backward_ms']):.1f}/"
                      f"{float(ours['step_ms']):.1f} | {theirs['forward_ms']:.1f}/"
                      f"{theirs['backward_ms']:.1f}/{theirs['step_ms']:.1f}", flush=True)
                rows.append(dict(round=k, threads=t, dplab_tokens_per_s=ours["tokens_per_s"],
                                 torch_tokens_per_s=theirs["tokens_per_s"], ratio=ratio,
                                 blas=theirs["blas"], cpu=model, vector_extensions=ext))
        print(f"\n{'threads':>7} {'rounds':>6} {'median dplab/torch':>19} {'range':>14}")
        for t, r in ratios.items():
            print(f"{t:>7} {len(r):>6} {statistics.median(r):>19.2f} {min(r):>6.2f}-{max(r):.2f}")
    if a.csv:
        write_csv(a.csv, rows)


if __name__ == "__main__":
    main()
