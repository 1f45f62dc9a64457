#!/usr/bin/env python3
"""The Python side of hf_export_test.cc, run with the interop venv (transformers, safetensors).

  interop_check.py hf-vit  --dir D --images X.npy --hidden H.npy --embedding E.npy
  interop_check.py hf-vit-classifier --dir D --images X.npy --hidden H.npy --embedding E.npy
  interop_check.py hf-clip --dir D --images X.npy --hidden H.npy --embedding E.npy
      loads D with transformers strictly (output_loading_info: no missing, unexpected or
      misshapen key, no error), runs it on X and compares every hidden state with H
      ([depth + 1, n, tokens, width], ours) and the embedding with E ([n, embed_dim]).
  interop_check.py safetensors --file F.safetensors [--pt P.pt] [--checkpoint-dir C]
                               --tensor-names torchvision|mlcd
      reads F with the safetensors library (load_file, safe_open) and compares every tensor
      with the .pt (torch.load) or the checkpoint's parameters.

Prints one JSON line with the figures; exits 1 with a message on the first failure.
"""
import argparse
import json
import sys

import numpy as np
import torch


def fail(message):
    print("interop_check: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def load_strictly(cls, directory):
    model, info = cls.from_pretrained(directory, output_loading_info=True)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            fail(f"{cls.__name__}.from_pretrained({directory}): {key} {sorted(info[key])}")
    return model.eval()


def max_diff(a, b, what):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    if a.shape != b.shape:
        fail(f"{what}: transformers gives shape {a.shape}, ours {b.shape}")
    return float(np.abs(a - b).max())


def compare(args, model, out, embedding, report):
    hidden = np.load(args.hidden)
    if len(out.hidden_states) != hidden.shape[0]:
        fail(f"{len(out.hidden_states)} hidden states from transformers, {hidden.shape[0]} ours")
    diffs = [max_diff(h, hidden[i], f"hidden_states[{i}]") for i, h in enumerate(out.hidden_states)]
    ours = np.load(args.embedding)
    report.update(hidden_states=len(diffs), hidden_max_abs_diff=max(diffs),
                  embedding_max_abs_diff=max_diff(embedding, ours, "embedding"),
                  embedding_scale=float(np.abs(ours).max()))
    for i, d in enumerate(diffs):
        if not d <= args.tolerance:
            fail(f"hidden_states[{i}] differs from ours by {d} > {args.tolerance}")
    if not report["embedding_max_abs_diff"] <= args.tolerance:
        fail(f"embedding differs by {report['embedding_max_abs_diff']} > {args.tolerance}")


def check_vit(args, report):
    from transformers import AutoModel, ViTModel
    model = load_strictly(ViTModel, args.dir)
    auto = load_strictly(AutoModel, args.dir)
    if type(auto) is not ViTModel:
        fail(f"AutoModel gave {type(auto).__name__}, not ViTModel")
    images = torch.from_numpy(np.load(args.images))
    with torch.no_grad():
        out = model(pixel_values=images, output_hidden_states=True)
        # The three lines of docs/export.md: our embedding from last_hidden_state.
        h = out.last_hidden_state
        emb = h[:, 0] @ model.pooler.dense.weight.T
        pooled = model.pooler(h)
    compare(args, model, out, emb, report)
    report["pooler_vs_three_lines"] = max_diff(pooled, emb.numpy(), "pooler_output")
    if report["pooler_vs_three_lines"] > 1e-6 or float(model.pooler.dense.bias.detach().abs().max()) != 0:
        fail("pooler_output is not the class token times pooler.dense.weight.T")
    report["class"] = "ViTModel"


def check_vit_classifier(args, report):
    from transformers import AutoModelForImageClassification, ViTForImageClassification
    model = load_strictly(ViTForImageClassification, args.dir)
    auto = load_strictly(AutoModelForImageClassification, args.dir)
    if type(auto) is not ViTForImageClassification:
        fail(f"AutoModelForImageClassification gave {type(auto).__name__}")
    if float(model.classifier.bias.detach().abs().max()) != 0:
        fail("classifier.bias is not zero")
    images = torch.from_numpy(np.load(args.images))
    with torch.no_grad():
        out = model(pixel_values=images, output_hidden_states=True)
    compare(args, model, out, out.logits, report)
    report["class"] = "ViTForImageClassification"


def check_clip(args, report):
    from transformers import CLIPVisionModel, CLIPVisionModelWithProjection
    model = load_strictly(CLIPVisionModelWithProjection, args.dir)
    images = torch.from_numpy(np.load(args.images))
    with torch.no_grad():
        out = model(pixel_values=images, output_hidden_states=True)
    compare(args, model, out, out.image_embeds, report)
    # A LLaVA-style tower: CLIPVisionModel (no projection) and the penultimate layer's patch
    # tokens.
    tower, info = CLIPVisionModel.from_pretrained(args.dir, output_loading_info=True)
    if info["missing_keys"] or info["mismatched_keys"]:
        fail(f"CLIPVisionModel: missing {info['missing_keys']}, "
             f"mismatched {info['mismatched_keys']}")
    with torch.no_grad():
        feats = tower.eval()(pixel_values=images, output_hidden_states=True).hidden_states[-2][:, 1:]
    hidden = np.load(args.hidden)
    report["llava_features"] = list(feats.shape)
    report["llava_max_abs_diff"] = max_diff(feats, hidden[-2][:, 1:], "hidden_states[-2][:, 1:]")
    if report["llava_max_abs_diff"] > args.tolerance:
        fail(f"the tower's penultimate patch tokens differ by {report['llava_max_abs_diff']}")
    report["class"] = "CLIPVisionModelWithProjection"


def checkpoint_parameters(directory):
    with open(directory + "/backbone.json") as f:
        entries = json.load(f)["parameters"]
    flat = np.load(directory + "/backbone.weights.npy")
    return {p["name"]: flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
            for p in entries}


def check_safetensors(args, report):
    import safetensors
    from safetensors import safe_open
    from safetensors.torch import load_file
    tensors = load_file(args.file)
    with safe_open(args.file, framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
    if keys != set(tensors):
        fail("safe_open and load_file list different tensors")
    if meta.get("format") != "pt" or meta.get("tensor_names") != args.tensor_names:
        fail(f"metadata {meta}: expected format pt, tensor_names {args.tensor_names}")
    if args.pt:
        expected = {k: v.numpy() for k, v in torch.load(args.pt, weights_only=True).items()}
    else:
        expected = checkpoint_parameters(args.checkpoint_dir)
    if set(expected) != set(tensors):
        fail(f"names differ: {sorted(set(expected) ^ set(tensors))}")
    for name, value in tensors.items():
        if value.dtype != torch.float32 or not np.array_equal(value.numpy(), expected[name]):
            fail(f"tensor {name} differs ({value.dtype}, {tuple(value.shape)})")
    report.update(tensors=len(tensors), safetensors=safetensors.__version__)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("kind", choices=["hf-vit", "hf-vit-classifier", "hf-clip", "safetensors"])
    p.add_argument("--dir")
    p.add_argument("--images")
    p.add_argument("--hidden")
    p.add_argument("--embedding")
    p.add_argument("--file")
    p.add_argument("--pt")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--tensor-names")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()
    torch.set_num_threads(1)
    report = {"kind": args.kind}
    checks = {"hf-vit": check_vit, "hf-vit-classifier": check_vit_classifier,
              "hf-clip": check_clip, "safetensors": check_safetensors}
    checks[args.kind](args, report)
    import transformers
    report.update(transformers=transformers.__version__, torch=torch.__version__)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
