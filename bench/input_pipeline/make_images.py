"""Writes web-like JPEGs for the input-pipeline benchmark, in ImageFolder layout.

Usage: make_images.py OUT_DIR [--count 400] [--seed 0]
Each image is 500 x 375 RGB at quality 90 (PIL's default 4:2:0 subsampling), 60-80 KB: a
collage of Fashion-MNIST items (Debian's dataset-fashion-mnist) upscaled bicubically and
tinted, on a smooth colour gradient, with photo-like sensor noise, so it compresses like a
photo of typical web size. OUT_DIR/<class>/<index>.jpg, the class being the first item's
label. Prints the count and the mean file size.
"""
import argparse
import gzip
import os

import numpy as np
from PIL import Image

IDX = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"
CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "boot"]
W, H = 500, 375


def load(n):
    with gzip.open(IDX) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:n]
    with gzip.open(LABELS) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return images, labels


def make(rng, items):
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    c0, c1 = rng.uniform(40, 215, 3), rng.uniform(40, 215, 3)
    angle = rng.uniform(0, np.pi)
    t = ((xx * np.cos(angle) + yy * np.sin(angle)) / (W + H) + 0.5).clip(0, 1)[..., None]
    img = c0 * (1 - t) + c1 * t
    img += 18 * np.sin(xx[..., None] / rng.uniform(15, 40) + yy[..., None] / rng.uniform(20, 50))
    for item in items:
        size = int(rng.integers(110, 230))
        tile = np.asarray(Image.fromarray(item).resize((size, size), Image.BICUBIC), np.float32)
        mask = (tile / 255.0)[..., None]
        tint = rng.uniform(30, 255, 3)
        y, x = int(rng.integers(0, H - size)), int(rng.integers(0, W - size))
        region = img[y:y + size, x:x + size]
        img[y:y + size, x:x + size] = region * (1 - mask) + tint * mask * (0.6 + 0.4 * mask)
    img += rng.normal(0, 12.0, img.shape)
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", type=int, default=90)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    images, labels = load(args.count * 3)
    total = 0
    for i in range(args.count):
        picks = rng.integers(0, len(images), 3)
        d = os.path.join(args.out, CLASSES[labels[picks[0]]])
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{i:05d}.jpg")
        make(rng, images[picks]).save(path, quality=args.quality)
        total += os.path.getsize(path)
    print(f"{args.count} images, mean {total / args.count / 1024:.1f} KB")


if __name__ == "__main__":
    main()
