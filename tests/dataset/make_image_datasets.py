#!/usr/bin/python3
"""Writes part of Fashion-MNIST as real image files, for the dataset tests.

Reads the IDX files of Debian's dataset-fashion-mnist (gzipped or not) and encodes the first
--count images of a split with PIL, in the layouts of docs/data.md:

  OUT/folder/<class name>/<key>.<ext>      image-folder with class folders
  OUT/flat/<key>.<ext>                     image-folder without classes
  OUT/shards/train-00000.tar ...           webdataset: <key>.<ext>, <key>.cls, <key>.json
  OUT/keys.txt                             the sample keys in Fashion-MNIST order
  OUT/labels.txt                           the class of each, in the same order

Key of image i: "%06d" % i. Encoded bytes are identical in the three layouts. --bad appends
four bad samples to the last shard and the flat folder, after the good ones: zzbad-0
(a PNG cut in half), zzbad-1 (random bytes named .jpg), zzbad-2 (zero bytes) and zzbad-3 (a
GIF named .png: unsupported). --rgb repeats
the grey channel three times; --size resizes (bilinear) before encoding; --format picks
png (lossless), jpeg (quality 90) or webp; "mixed" alternates png, jpeg and webp.
"""
import argparse
import gzip
import io
import json
import os
import struct
import tarfile

import numpy as np
from PIL import Image

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle-boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(directory, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise SystemExit("no %s in %s (install dataset-fashion-mnist)" % (stem, directory))


def encode(pixels, fmt, rgb, size):
    img = Image.fromarray(pixels, mode="L")
    if size and size != pixels.shape[0]:
        img = img.resize((size, size), Image.BILINEAR)
    if rgb:
        img = img.convert("RGB")
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, format="PNG")
    elif fmt == "jpeg":
        img.save(buf, format="JPEG", quality=90)
    else:
        img.save(buf, format="WEBP", quality=90)
    return buf.getvalue(), {"png": "png", "jpeg": "jpg", "webp": "webp"}[fmt]


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mnist", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--count", type=int, default=64)
    p.add_argument("--out", required=True)
    p.add_argument("--format", default="png", choices=["png", "jpeg", "webp", "mixed"])
    p.add_argument("--rgb", action="store_true")
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--key-prefix", default="", help="directory prefix of member names in tars")
    p.add_argument("--bad", action="store_true", help="append four undecodable samples")
    args = p.parse_args()

    prefix = "train" if args.split == "train" else "t10k"
    images = read_idx(find(args.mnist, prefix + "-images-idx3-ubyte"))[:args.count]
    labels = read_idx(find(args.mnist, prefix + "-labels-idx1-ubyte"))[:args.count]
    os.makedirs(os.path.join(args.out, "flat"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "shards"), exist_ok=True)
    for c in CLASSES:
        os.makedirs(os.path.join(args.out, "folder", c), exist_ok=True)
    per_shard = (len(images) + args.shards - 1) // args.shards
    tars = [tarfile.open(os.path.join(args.out, "shards", "train-%05d.tar" % s), "w",
                         format=tarfile.PAX_FORMAT) for s in range(args.shards)]
    keys = []
    for i, (pixels, label) in enumerate(zip(images, labels)):
        fmt = args.format
        if fmt == "mixed":
            fmt = ["png", "jpeg", "webp"][i % 3]
        data, ext = encode(pixels, fmt, args.rgb, args.size)
        key = "%06d" % i
        keys.append(key)
        with open(os.path.join(args.out, "folder", CLASSES[label], key + "." + ext), "wb") as f:
            f.write(data)
        with open(os.path.join(args.out, "flat", key + "." + ext), "wb") as f:
            f.write(data)
        tar = tars[i // per_shard]
        member = args.key_prefix + key
        add_member(tar, member + "." + ext, data)
        add_member(tar, member + ".cls", b"%d" % label)
        add_member(tar, member + ".json", json.dumps({"key": key, "label": int(label)}).encode())
    if args.bad:
        good, _ = encode(images[0], "png", args.rgb, args.size)
        gif = io.BytesIO()
        Image.fromarray(images[0], mode="L").save(gif, format="GIF")
        rng = np.random.default_rng(5)
        bad = [(good[:len(good) // 2], "png"), (rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(),
               "jpg"), (b"", "png"), (gif.getvalue(), "png")]
        for j, (data, ext) in enumerate(bad):
            key = "zzbad-%d" % j
            add_member(tars[-1], args.key_prefix + key + "." + ext, data)
            with open(os.path.join(args.out, "flat", key + "." + ext), "wb") as f:
                f.write(data)
    for tar in tars:
        tar.close()
    with open(os.path.join(args.out, "keys.txt"), "w") as f:
        f.write("".join(k + "\n" for k in keys))
    with open(os.path.join(args.out, "labels.txt"), "w") as f:
        f.write("".join("%d\n" % l for l in labels))


if __name__ == "__main__":
    main()
