#!/usr/bin/python3
"""The anchor of bench/worker_loss: the classification layer written in PyTorch the way
PartialFC v2 (insightface arcface_torch/partial_fc_v2.py) does it, with the MLCD loss:

- a dense weight Parameter [K, D]; each step samples the positives plus random negatives with
  torch.rand + topk (PartialFC v2's sampler), indexes the sampled rows of the Parameter;
- F.normalize, F.linear, clamp, the margin applied under no_grad (CombinedMarginLoss style);
- autograd for the backward, which produces a dense [K, D] weight gradient;
- torch.optim.AdamW over the whole weight.

Prints one JSON object with the per-step timings. Run with /usr/bin/python3 (python3-torch).
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


class PartialFcV2(torch.nn.Module):
    def __init__(self, num_classes, dim, sample_ratio, scale, margin, variant):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.normal(0, 0.01, (num_classes, dim)))
        self.num_classes = num_classes
        self.num_sample = math.ceil(sample_ratio * num_classes)
        self.scale = scale
        self.margin = margin
        self.variant = variant

    def sample(self, labels):
        with torch.no_grad():
            valid = labels >= 0
            positive = torch.unique(labels[valid], sorted=True)
            if self.num_sample - positive.size(0) >= 0:
                perm = torch.rand(self.num_classes)
                perm[positive] = 2.0
                index = torch.topk(perm, k=self.num_sample)[1]
                index = index.sort()[0]
            else:
                index = positive
            mapped = labels.clone()
            mapped[valid] = torch.searchsorted(index, labels[valid])
        return self.weight[index], mapped

    def forward(self, embeddings, labels):
        weight, mapped = self.sample(labels)
        logits = F.linear(F.normalize(embeddings), F.normalize(weight)).clamp(-1, 1)
        batch, sampled = logits.shape
        if self.variant == "softmax":
            mapped = mapped[:, :1]
        valid = mapped >= 0
        rows = torch.arange(batch).unsqueeze(1).expand_as(mapped)
        pos_mask = torch.zeros(batch, sampled, dtype=torch.bool)
        pos_mask[rows[valid], mapped[valid]] = True
        with torch.no_grad():  # the margin's value, derivative as for s·c (PartialFC)
            target = logits[pos_mask]
            delta = torch.zeros_like(logits)
            delta[pos_mask] = torch.cos(torch.acos(target) + self.margin) - target
        z = (logits + delta) * self.scale
        if self.variant == "softmax":
            return F.cross_entropy(z, mapped[:, 0])
        neg = z.masked_fill(pos_mask, -math.inf)
        pos = (-z).masked_fill(~pos_mask, -math.inf)
        lse_n = torch.logsumexp(neg, dim=1)
        lse_p = torch.logsumexp(pos, dim=1)
        zero = torch.zeros_like(lse_n)
        if self.variant == "mlcd":
            loss = torch.logaddexp(zero, lse_p) + torch.logaddexp(zero, lse_n)
        else:  # mlc: log(1 + Σn e^zn · Σp e^-zp)
            loss = torch.logaddexp(zero, lse_n + lse_p)
        return loss.mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--classes", type=int, default=100000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--ratio", type=float, default=0.1)
    p.add_argument("--labels", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variant", default="mlcd")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layer = PartialFcV2(args.classes, args.dim, args.ratio, 32.0, 0.3, args.variant)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3, weight_decay=0.2)
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        emb = torch.randn(args.batch, args.dim, generator=gen).requires_grad_(True)
        labels = torch.randint(0, args.classes, (args.batch, args.labels), generator=gen)
        t0 = time.perf_counter()
        loss = layer(emb, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        if step >= args.warmup:
            times.append(t1 - t0)
            losses.append(loss.item())
    print(json.dumps({
        "implementation": "pytorch_partial_fc_v2",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "step_ms_median": 1000 * statistics.median(times),
        "step_ms_mean": 1000 * statistics.mean(times),
        "step_ms_all": [1000 * t for t in times],
        "last_loss": losses[-1],
    }))


if __name__ == "__main__":
    main()
