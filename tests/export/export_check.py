#!/usr/bin/env python3
"""The other side of the export test (tests/export/export_test.cc): loads an
`mlcdctl export --format torchvision` file with python3-torchvision and compares its
embeddings with `mlcd-worker embed --images` on the same input tensors; checks a
`--format safetensors` file of the same checkpoint against the .pt, byte for byte.

Prints one JSON line with the figures; exits 1 with a message on the first failure.
"""
import argparse
import json
import struct
import sys

import numpy as np
import torch
import torchvision


def fail(message):
    print("export_check: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def check_torchvision(args, report):
    # weights_only: the safe unpickler (torch >= 2.6 uses it by default) must accept the file.
    state = torch.load(args.pt, weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        fail(f"{args.pt} is not a dict of tensors: {type(state)}")
    with open(args.config) as f:
        config = json.load(f)
    ctor = config["torchvision"]["args"]
    model = torchvision.models.VisionTransformer(**ctor)
    model.load_state_dict(state, strict=True)  # raises on a missing, extra or misshapen key
    model.eval()
    if torch.count_nonzero(state["heads.head.bias"]) != 0:
        fail("heads.head.bias is not zero")
    images = torch.from_numpy(np.load(args.images))
    if images.shape[1] == 1:  # a --grey-as-rgb export: the grey input on all 3 channels
        images = images.repeat(1, 3, 1, 1)
    with torch.no_grad():
        out = model(images)
    out = out / out.norm(dim=1, keepdim=True).clamp_min(1e-12)
    ours = np.load(args.embeddings)
    if ours.shape != tuple(out.shape):
        fail(f"mlcd-worker embed gave {ours.shape}, torchvision {tuple(out.shape)}")
    diff = float(np.abs(out.numpy() - ours).max())
    report.update(rows=int(ours.shape[0]), embed_dim=int(ours.shape[1]), max_abs_diff=diff,
                  tensors=len(state), torchvision=torchvision.__version__, torch=torch.__version__)
    if not diff <= args.tolerance:
        fail(f"max abs difference {diff} > {args.tolerance}")
    if args.checkpoint_dir:
        # The projection is copied, not rescaled (the L2-normalised comparison cannot see a scale).
        with open(args.checkpoint_dir + "/backbone.json") as f:
            entries = {p["name"]: p for p in json.load(f)["parameters"]}
        flat = np.load(args.checkpoint_dir + "/backbone.weights.npy")
        head = entries["head"]
        ours_head = flat[head["offset"]:head["offset"] + head["numel"]].reshape(head["shape"])
        if not np.array_equal(ours_head, state["heads.head.weight"].numpy()):
            fail("heads.head.weight differs from the checkpoint's projection")
    return state, config


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    begin = 8 + n
    if begin % 8 != 0:
        fail(f"{path}: data starts at byte {begin}, not a multiple of 8")
    meta = header.pop("__metadata__", {})
    tensors, covered = {}, 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        lo, hi = entry["data_offsets"]
        if lo != covered:
            fail(f"{path}: tensor {name} starts at {lo}, expected {covered} (hole or overlap)")
        if entry["dtype"] != "F32":
            fail(f"{path}: tensor {name} has dtype {entry['dtype']}")
        array = np.frombuffer(data[begin + lo:begin + hi], dtype="<f4").reshape(entry["shape"])
        tensors[name] = array
        covered = hi
    if begin + covered != len(data):
        fail(f"{path}: {len(data) - begin - covered} trailing bytes")
    return tensors, meta, [k for k, _ in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])]


def check_safetensors(args, state, tv_config, report):
    tensors, meta, order = read_safetensors(args.safetensors)
    if order != sorted(order):
        fail("safetensors data is not in name order")
    if meta.get("format") != "pt":
        fail(f"__metadata__ {meta} lacks format=pt")
    if set(tensors) != set(state):
        fail(f"safetensors names {sorted(set(tensors) ^ set(state))} differ from the .pt")
    for name, array in tensors.items():
        if not np.array_equal(array, state[name].numpy()):
            fail(f"safetensors tensor {name} differs from the .pt")
    with open(args.st_config) as f:
        config = json.load(f)
    if config["torchvision"]["args"] != tv_config["torchvision"]["args"]:
        fail("config.json's torchvision arguments differ from the .pt's")
    report["safetensors_tensors"] = len(tensors)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pt", required=True)
    p.add_argument("--config", required=True, help="the JSON written beside the .pt")
    p.add_argument("--images", required=True,
                   help="float32 [N, C, S, S] .npy (C = 1: repeated on 3 channels)")
    p.add_argument("--embeddings", required=True, help="mlcd-worker embed --images output")
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--safetensors", default="")
    p.add_argument("--st-config", default="", help="<name>.config.json beside the .safetensors")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()
    torch.set_num_threads(1)
    report = {}
    state, config = check_torchvision(args, report)
    if args.safetensors:
        check_safetensors(args, state, config, report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
