#!/usr/bin/python3
"""Python anchor of the ViT train-step benchmark (bench/worker_vit).

The same architecture as worker/model/vit.h written the idiomatic PyTorch way (timm-style
attention: fused qkv Linear, reshape/permute, q @ k^T, softmax, @ v), pre-norm blocks,
class token, projection to the embedding size; AdamW with the worker's parameter groups
(weight decay on matrices only), gradient-norm clipping and the same cheap surrogate loss.
Prints one JSON object with images/s.

  /usr/bin/python3 bench/worker_vit/vit_step.py --threads 2 --batch 128 --steps 5
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "vit-tiny": (192, 6, 3, 7),
    "vit-small": (384, 12, 6, 7),
}


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x


class ViT(nn.Module):
    def __init__(self, image_size, patch, channels, width, depth, heads, mlp_ratio, embed_dim):
        super().__init__()
        self.patch_embed = nn.Conv2d(channels, width, kernel_size=patch, stride=patch)
        tokens = (image_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, embed_dim, bias=False)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="vit-small", choices=sorted(PRESETS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--image-size", type=int, default=28)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--embed-dim", type=int, default=512)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    width, depth, heads, patch = PRESETS[a.preset]
    model = ViT(a.image_size, patch, a.channels, width, depth, heads, 4.0, a.embed_dim)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "pos_embed" not in n and "cls_token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "pos_embed" not in n and "cls_token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.2}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.98), eps=1e-6)
    images = torch.rand(a.batch, a.channels, a.image_size, a.image_size)
    target = F.normalize(torch.randn(a.batch, a.embed_dim), dim=1)

    def step():
        opt.zero_grad(set_to_none=True)
        emb = model(images)
        loss = 1.0 - (F.normalize(emb, dim=1) * target).sum(1).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    if a.profile:
        with torch.profiler.profile() as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"impl": "python3-torch", "torch": torch.__version__, "preset": a.preset, "threads": a.threads,
                      "batch": a.batch, "steps": a.steps, "median_step_seconds": median,
                      "images_per_second": a.batch / median, "step_seconds": times,
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
