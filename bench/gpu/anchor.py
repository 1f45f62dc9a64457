#!/usr/bin/env python3
"""The PyTorch anchor of issue 27 (bench/RESULTS.md "GPU step"): what a plain PyTorch script
gets on the same GPU, for worker_step_bench to be compared with.

A ViT (the project's presets: vit-b16 = width 768, depth 12, heads 12, patch 16, 224 px, RGB;
vit-tiny = 192/6/3/7, 28 px, one channel) with attention through
F.scaled_dot_product_attention, and a PartialFC-v2-style MLCD layer on the same device: the
centres are one dense [K, D] parameter; each step samples every positive of the batch plus
random others up to ceil(r K) (PartialFC v2's rand + topk), gathers those rows with autograd
(a dense K x D gradient, as PartialFC v2 makes), and computes the MLCD loss (paper Eq. 6, arc
margin, PartialFC's gradient convention). bf16 autocast, fused AdamW for the backbone and the
centres. Modes: eager, and compile (torch.compile on the backbone). The step is split the
way the worker splits it: backbone forward, layer forward+backward on the detached embeddings,
backbone backward, both optimizers; CUDA events time the parts.

  python3 bench/gpu/anchor.py --preset vit-b16 --batch 256 --classes 100000,1000000 \\
      --modes eager,compile --steps 20 --out anchor.json
  python3 bench/gpu/anchor.py --smoke --out anchor.json      # CPU, vit-tiny, batch 8, K = 1000

Prints one JSON object per (mode, K) and writes them all (--out).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# name: (width, depth, heads, patch, image size, channels); embed_dim 512, MLP ratio 4.
PRESETS = {
    "vit-tiny": (192, 6, 3, 7, 28, 1),
    "vit-small": (384, 12, 6, 7, 28, 1),
    "vit-b32": (768, 12, 12, 32, 224, 3),
    "vit-b16": (768, 12, 12, 16, 224, 3),
    "vit-l14": (1024, 24, 16, 14, 224, 3),
}
EMBED_DIM = 512


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self, width, depth, heads, patch, image, channels):
        super().__init__()
        self.patch = nn.Conv2d(channels, width, patch, stride=patch)
        self.pos = nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, EMBED_DIM, bias=False)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(1))


class PartialFcV2Mlcd(nn.Module):
    """PartialFC-v2-style sampled MLCD layer (one rank)."""

    def __init__(self, classes, dim, ratio, scale=32.0, margin=0.3):
        super().__init__()
        self.weight = nn.Parameter(0.01 * torch.randn(classes, dim))
        self.num_sample = max(1, math.ceil(ratio * classes))
        self.scale, self.margin = scale, margin

    def forward(self, emb, labels):
        k = self.weight.shape[0]
        valid = labels >= 0
        positive = torch.unique(labels[valid])
        with torch.no_grad():
            perm = torch.rand(k, device=emb.device)
            perm[positive] = 2.0
            count = max(self.num_sample, positive.numel())
            index = torch.topk(perm, k=count)[1].sort()[0]
        w = self.weight[index]  # autograd: a dense [K, D] gradient, as PartialFC v2
        c = F.linear(F.normalize(emb.float()), F.normalize(w.float())).float().clamp(-1, 1)
        col = torch.searchsorted(index, labels.clamp_min(0))
        rows = torch.arange(labels.shape[0], device=emb.device).unsqueeze(1).expand_as(labels)
        pos = torch.zeros_like(c, dtype=torch.bool)
        pos[rows[valid], col[valid]] = True
        z = self.scale * c
        with torch.no_grad():
            delta = self.scale * torch.cos(torch.acos(c) + self.margin) - z
        z = z + torch.where(pos, delta, torch.zeros_like(delta))
        neg_inf = torch.finfo(z.dtype).min
        zero = torch.zeros(z.shape[0], 1, device=z.device, dtype=z.dtype)
        lp = torch.logsumexp(torch.cat([zero, torch.where(pos, -z, neg_inf)], 1), 1)
        ln = torch.logsumexp(torch.cat([zero, torch.where(pos, neg_inf, z)], 1), 1)
        return (lp + ln).mean()


class Timer:
    """Events on CUDA, the wall clock (after the work) on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def ms(self, i, j):
        if self.cuda:
            self.marks[j].synchronize()
            return self.marks[i].elapsed_time(self.marks[j])
        return 1000.0 * (self.marks[j] - self.marks[i])


def adamw(params, lr, device, wd):
    kw = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd, **kw)


def run(a, mode, classes, device, model):
    torch.manual_seed(1)
    width, depth, heads, patch, image, channels = PRESETS[a.preset]
    layer = PartialFcV2Mlcd(classes, EMBED_DIM, a.sample_ratio).to(device)
    backbone_opt = adamw(model.parameters(), 1e-4, device, 0.2)
    centre_opt = adamw(layer.parameters(), 1e-4, device, 0.2)
    net = torch.compile(model) if mode == "compile" else model
    x = torch.rand(a.batch, channels, image, image, device=device)
    y = torch.randint(0, classes, (a.batch, a.labels_per_sample), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    steps, parts = [], {"backbone_forward": [], "layer": [], "backbone_backward": [],
                        "backbone_optimizer": [], "centre_optimizer": []}
    first = time.perf_counter()
    for i in range(a.warmup + a.steps):
        t = Timer(device)
        t.mark()
        with autocast:
            emb = net(x).float()
        t.mark()
        e = emb.detach().requires_grad_()
        with autocast:
            loss = layer(e, y)
        loss.backward()
        t.mark()
        emb.backward(e.grad)
        t.mark()
        backbone_opt.step()
        backbone_opt.zero_grad(set_to_none=True)
        t.mark()
        centre_opt.step()
        centre_opt.zero_grad(set_to_none=True)
        t.mark()
        total = t.ms(0, 5)
        if i == a.warmup - 1 or (a.warmup == 0 and i == 0):
            warm_seconds = time.perf_counter() - first
        if i < a.warmup:
            continue
        steps.append(total)
        for k, (p, q) in zip(parts, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]):
            parts[k].append(t.ms(p, q))
    step_ms = statistics.median(steps)
    med = {k: statistics.median(v) for k, v in parts.items()}
    layer_ms = med["layer"] + med["centre_optimizer"]
    return {
        "impl": "pytorch-anchor", "mode": mode, "preset": a.preset, "classes": classes,
        "batch": a.batch, "precision": a.precision, "sample_ratio": a.sample_ratio,
        "labels_per_sample": a.labels_per_sample, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "steps": a.steps, "warmup": a.warmup,
        "warmup_seconds": warm_seconds, "median_step_ms": step_ms,
        "images_per_second": 1000.0 * a.batch / step_ms, "layer_and_centre_optimizer_ms": layer_ms,
        "layer_fraction_of_step": layer_ms / step_ms, "split_ms": med,
        "last_loss": float(loss.item()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="vit-b16", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--classes", default="100000,1000000", help="comma-separated K values")
    ap.add_argument("--sample-ratio", type=float, default=0.1)
    ap.add_argument("--labels-per-sample", type=int, default=8)
    ap.add_argument("--modes", default="eager,compile", help="eager and/or compile")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, vit-tiny, batch 8, K = 1000, 2 + 3 steps (checks the script)")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.smoke:
        a.device, a.preset, a.batch, a.classes = "cpu", "vit-tiny", 8, "1000"
        a.steps, a.warmup = 3, 2
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("anchor: no CUDA device (use --smoke or --device cpu)")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compile"):
            sys.exit(f"anchor: unknown mode '{m}'; use eager and/or compile")
    results = []
    for mode in modes:
        torch.manual_seed(0)
        model = ViT(*PRESETS[a.preset]).to(device)
        for classes in (int(k) for k in a.classes.split(",")):
            r = run(a, mode, classes, device, model)
            print(json.dumps(r), flush=True)
            results.append(r)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
