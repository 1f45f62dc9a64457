#!/usr/bin/env python3
"""Writes an image-folder dataset of RGB JPEGs at run time (bench/gpu/run_job.sh).

root/train/<class>/<i>.jpg and root/test/<class>/<i>.jpg: each class is a family of
oriented colour gratings (its own orientation, frequency and palette) with per-image phase,
jitter and noise, so clustering finds structure and a probe can separate the classes.
JPEG quality 90, baseline, 4:2:0, like photographs from a crawl.

  make_jpegs.py --out DIR --classes 100 --train-per-class 256 --test-per-class 20 \
      --width 512 --height 384 [--workers N]
"""
import argparse
import os
from multiprocessing import Pool

import numpy as np
from PIL import Image


def class_params(c, seed):
    rng = np.random.default_rng(seed * 1_000_003 + c)
    return {
        "angle": rng.uniform(0, np.pi),
        "freq": rng.uniform(2.0, 12.0),
        "base": rng.uniform(0.2, 0.8, size=3),
        "amp": rng.uniform(0.1, 0.35, size=3),
        "freq2": rng.uniform(1.0, 5.0),
    }


def make_image(args):
    path, c, i, width, height, seed = args
    p = class_params(c, seed)
    rng = np.random.default_rng((seed * 7919 + c) * 100_003 + i)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    x /= width
    y /= height
    a = p["angle"] + rng.normal(0, 0.08)
    phase = rng.uniform(0, 2 * np.pi)
    u = x * np.cos(a) + y * np.sin(a)
    v = -x * np.sin(a) + y * np.cos(a)
    g = np.sin(2 * np.pi * p["freq"] * u + phase) * np.cos(2 * np.pi * p["freq2"] * v)
    img = p["base"][None, None, :] + p["amp"][None, None, :] * g[..., None]
    img += rng.normal(0, 0.03, size=img.shape).astype(np.float32)
    img = np.clip(img * 255.0, 0, 255).astype(np.uint8)
    Image.fromarray(img, "RGB").save(path, "JPEG", quality=90)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--train-per-class", type=int, default=256)
    ap.add_argument("--test-per-class", type=int, default=20)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--height", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    jobs = []
    for split, per, offset in (("train", a.train_per_class, 0), ("test", a.test_per_class, 10**6)):
        for c in range(a.classes):
            d = os.path.join(a.out, split, f"class{c:04d}")
            os.makedirs(d, exist_ok=True)
            for i in range(per):
                jobs.append((os.path.join(d, f"{i:06d}.jpg"), c, offset + i, a.width, a.height,
                             a.seed))
    with Pool(a.workers) as pool:
        for _ in pool.imap_unordered(make_image, jobs, chunksize=64):
            pass
    print(f"make_jpegs: {len(jobs)} JPEGs of {a.width}x{a.height} under {a.out}")


if __name__ == "__main__":
    main()
