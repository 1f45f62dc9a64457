#!/usr/bin/python3
"""Checks a dataset made by `mlcdctl dataset make` against the layout docs/data.md documents,
with Python's own tarfile (and PIL when installed) rather than the project's reader.

    check_webdataset_layout.py DIR

For each split (train, test): the shards DIR/<split>/NNNNN.tar are plain tars of regular
members named <key>.<extension>, grouped into samples as the webdataset library groups them
(its base_plus_ext regex: the key is the path up to the first '.' of the basename); each
sample has one .png of the size and mode dataset.json gives, and exactly the annotation
members DIR/<split>/annotations.json declares (.labels: distinct ascending ids in range;
.<name>.cls: a class in range); keys are 000000, 000001, ... in order. For fashion-mosaic,
DIR/train-labels.jsonl lists the same label sets by key. Prints one line per split; exits 1
naming the first problem.
"""
import io
import json
import os
import re
import sys
import tarfile

try:
    from PIL import Image
except ImportError:  # the layout is still checked, the pixels are not
    Image = None

BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def fail(message):
    print("layout problem: " + message)
    sys.exit(1)


def samples_of(shard):
    """(key, {extension: bytes}) for each run of members sharing a key, in order."""
    current_key, members = None, {}
    with tarfile.open(shard, "r:") as tar:
        for info in tar:
            if not info.isfile():
                fail(f"{shard}: member {info.name} is not a regular file")
            if info.mode & 0o777 != 0o644 or info.mtime != 0:
                fail(f"{shard}: member {info.name} has mode {oct(info.mode)} mtime {info.mtime}")
            m = BASE_PLUS_EXT.match(info.name)
            if not m:
                fail(f"{shard}: member {info.name} has no extension")
            key, ext = m.group(1), m.group(2)
            if key != current_key:
                if current_key is not None:
                    yield current_key, members
                current_key, members = key, {}
            if ext in members:
                fail(f"{shard}: sample {key} has two .{ext} members")
            members[ext] = tar.extractfile(info).read()
    if current_key is not None:
        yield current_key, members


def check_split(root, split, about):
    shard_dir = os.path.join(root, split)
    with open(os.path.join(shard_dir, "annotations.json")) as f:
        declared = json.load(f)
    if json.dumps(declared, sort_keys=True) != json.dumps(about["annotations"], sort_keys=True):
        fail(f"{split}/annotations.json differs from dataset.json's annotations")
    shards = sorted(n for n in os.listdir(shard_dir) if n.endswith(".tar"))
    if not shards or shards[0] != "00000.tar":
        fail(f"{split}: shards must be 00000.tar, 00001.tar, ...: {shards}")
    for i, name in enumerate(shards):
        if name != f"{i:05d}.tar":
            fail(f"{split}: shard {name} out of sequence")
    labels = declared.get("labels")
    attributes = declared.get("attributes", [])
    expected = {"png"}
    if labels:
        expected.add("labels")
    for a in attributes:
        expected.add(a["name"] + ".cls")
    size, channels = about["image_size"], about["channels"]
    label_sets = {}
    count = 0
    for shard in shards:
        path = os.path.join(shard_dir, shard)
        per_shard = 0
        for key, members in samples_of(path):
            if key != f"{count:06d}":
                fail(f"{path}: sample {count} has key {key}")
            extra = set(members) - expected - {"cls"}
            if set(members) & expected != expected or extra:
                fail(f"{path}: sample {key} has members {sorted(members)}, expected "
                     f"{sorted(expected)} (and maybe cls)")
            png = members["png"]
            if not png.startswith(b"\x89PNG\r\n\x1a\n"):
                fail(f"{path}: {key}.png is not a PNG")
            if Image is not None:
                image = Image.open(io.BytesIO(png))
                if image.size != (size, size) or image.mode != ("L" if channels == 1 else "RGB"):
                    fail(f"{path}: {key}.png is {image.size} {image.mode}")
            if labels:
                text = members["labels"].decode()
                ids = [int(t) for t in text.split()]
                if ids != sorted(set(ids)) or not all(0 <= j < labels["count"] for j in ids):
                    fail(f"{path}: {key}.labels holds '{text}'")
                if about["kind"] == "fashion-mosaic" and not 1 <= len(ids) <= 4:
                    fail(f"{path}: mosaic {key} has {len(ids)} labels")
                label_sets[key] = ids
            for a in attributes:
                v = int(members[a["name"] + ".cls"].decode())
                if not 0 <= v < a["count"]:
                    fail(f"{path}: {key}.{a['name']}.cls = {v} is outside [0, {a['count']})")
            if "cls" in members:
                first = attributes[0]["name"] if about["kind"] == "fashion-tint" else "shape"
                if members["cls"] != members[first + ".cls"]:
                    fail(f"{path}: {key}.cls differs from {key}.{first}.cls")
            count += 1
            per_shard += 1
        if per_shard > about["samples_per_shard"]:
            fail(f"{path}: {per_shard} samples, more than {about['samples_per_shard']}")
    if count != about[split]:
        fail(f"{split}: {count} samples, dataset.json says {about[split]}")
    if about["kind"] == "fashion-mosaic" and split == "train":
        with open(os.path.join(root, "train-labels.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        if {l["key"]: l["labels"] for l in lines} != label_sets or len(lines) != count:
            fail("train-labels.jsonl does not list the shards' label sets")
    print(f"{split}: {count} samples in {len(shards)} shards follow the layout"
          + ("" if Image else " (PIL missing: pixels not checked)"))


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "dataset.json")) as f:
        about = json.load(f)
    for split in ("train", "test"):
        check_split(root, split, about)


if __name__ == "__main__":
    main()
