#!/usr/bin/env python3
"""`mlcd-worker loss-check --variant bce|mulcon` against float64 NumPy oracles written here from
the definitions (docs/loss.md, "Label heads"), at world sizes 1 and 3 (real processes over
Gloo; 3 ranks get unequal numbers of images):

- bce: the multi-label BCE over a linear head, loss and its analytic gradients;
- mulcon --embeddings: the label-level contrastive loss (LLCL), its gradient by central
  differences of the oracle's loss;
- mulcon --tokens --head: the whole label-attention head (self-attention, cross-attention
  from the label embeddings, self-attention, per-label classifiers, projector) written out in
  NumPy, L = BCE + γ·LLCL, the tokens' and some parameters' gradients by central differences.

The labels have padding, a repeated label, an image without labels and a label only one image
carries (an anchor without positive).

  label_heads_oracle_test.py MLCD_WORKER
Exits 1 naming the first difference.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

# 7 images, 4 classes; label 3 only on image 2; image 4 has none; image 1 repeats label 1.
LABELS = np.array([[0, 1, -1], [1, 1, -1], [3, 0, 2], [2, -1, -1], [-1, -1, -1], [2, 0, -1],
                   [1, -1, -1]], dtype=np.int64)
K = 4


def fail(message):
    print("label_heads_oracle_test: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def multi_hot(labels, k):
    y = np.zeros((len(labels), k))
    for i, row in enumerate(labels):
        for v in row:
            if v >= 0:
                y[i, v] = 1.0
    return y


def bce(x, y):
    return float(np.mean(np.logaddexp(0, x) - y * x))


def llcl(z, labels, tau):
    rows, ids = [], []
    for i, row in enumerate(labels):
        for j in sorted(set(int(v) for v in row if v >= 0)):
            rows.append(z[i, j] / max(np.linalg.norm(z[i, j]), 1e-12))
            ids.append(j)
    total, anchors = 0.0, 0
    for a in range(len(rows)):
        others = [b for b in range(len(rows)) if b != a]
        if not others:
            continue
        s = np.array([rows[a] @ rows[b] / tau for b in others])
        log_den = np.log(np.sum(np.exp(s)))
        pos = [k for k, b in enumerate(others) if ids[b] == ids[a]]
        if not pos:
            continue
        total += float(np.mean([log_den - s[k] for k in pos]))
        anchors += 1
    return total / anchors if anchors else 0.0


def central(f, x, h=1e-6, entries=None):
    g = np.zeros_like(x)
    for idx in (entries if entries is not None else np.ndindex(*x.shape)):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        g[idx] = (f(plus) - f(minus)) / (2 * h)
    return g


# The head, as docs/loss.md and worker/model/label_attention_head.h define it.
BLOCKS = ["token_attention", "label_attention", "label_self_attention"]
PARTS = ["query", "key", "value", "output", "feedforward"]


def head_shapes(C, L, D, dz):
    shapes = {"label_embeddings": (L, C), "classifier_weight": (L, D), "classifier_bias": (L,),
              "projector_hidden.weight": (D, D), "projector_hidden.bias": (D,),
              "projector_out.weight": (dz, D), "projector_out.bias": (dz,)}
    for block, (q_in, k_in, out) in zip(BLOCKS, [(C, C, C), (C, C, D), (D, D, D)]):
        for part in PARTS:
            fan_in = {"query": q_in, "key": k_in, "value": k_in}.get(part, out)
            shapes[f"{block}.{part}.weight"] = (out, fan_in)
            shapes[f"{block}.{part}.bias"] = (out,)
        for norm in ("norm1", "norm2"):
            shapes[f"{block}.{norm}.weight"] = (out,)
            shapes[f"{block}.{norm}.bias"] = (out,)
    return shapes


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def mab(p, name, q_in, k_in, heads):
    lin = lambda x, part: x @ p[f"{name}.{part}.weight"].T + p[f"{name}.{part}.bias"]
    q, k, v = lin(q_in, "query"), lin(k_in, "key"), lin(k_in, "value")
    b, nq, d = q.shape
    dh = d // heads
    split = lambda x: x.reshape(b, x.shape[1], heads, dh).transpose(0, 2, 1, 3)
    s = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(dh)
    s = np.exp(s - s.max(-1, keepdims=True))
    a = (s / s.sum(-1, keepdims=True)) @ split(v)
    att = a.transpose(0, 2, 1, 3).reshape(b, nq, d)
    first = layer_norm(q + lin(att, "output"), p[f"{name}.norm1.weight"], p[f"{name}.norm1.bias"])
    return layer_norm(first + np.maximum(lin(first, "feedforward"), 0), p[f"{name}.norm2.weight"],
                      p[f"{name}.norm2.bias"])


def mulcon_loss(p, tokens, labels, heads, tau, gamma):
    r = mab(p, "token_attention", tokens, tokens, heads)
    u = np.broadcast_to(p["label_embeddings"], (len(tokens),) + p["label_embeddings"].shape)
    g = mab(p, "label_attention", u, r, heads)
    g = mab(p, "label_self_attention", g, g, heads)
    logits = (g * p["classifier_weight"]).sum(-1) + p["classifier_bias"]
    hidden = np.maximum(g @ p["projector_hidden.weight"].T + p["projector_hidden.bias"], 0)
    z = hidden @ p["projector_out.weight"].T + p["projector_out.bias"]
    return bce(logits, multi_hot(labels, logits.shape[1])) + gamma * llcl(z, labels, tau)


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(info["shape"])
    return out


def run(worker, args, what, d, world):
    out = os.path.join(d, f"{what.replace(' ', '_')}-{world}")
    cmd = [worker, "loss-check", "--world-size", str(world), "--out", out] + args
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{what}, world size {world}: exit {done.returncode}: {done.stderr[-2000:]}")
    return out


def close(what, ours, oracle, rel):
    scale = np.abs(oracle).max()
    diff = np.abs(np.asarray(ours, dtype=np.float64) - oracle).max()
    if not scale > 1e-5 or diff > rel * scale:
        fail(f"{what}: differs by {diff} (largest {scale})")
    print(f"{what}: max diff {diff:.2e} of {scale:.2e}")


def main():
    worker = sys.argv[1]
    rng = np.random.default_rng(9)
    B = len(LABELS)
    with tempfile.TemporaryDirectory() as d:
        path = lambda name: os.path.join(d, name)
        np.save(path("Y.npy"), LABELS)
        # bce: analytic gradients of the mean over samples and classes.
        E = rng.standard_normal((B, 5)).astype(np.float32)
        W = rng.standard_normal((K, 5)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32)
        for name, arr in (("E.npy", E), ("W.npy", W), ("b.npy", b)):
            np.save(path(name), arr)
        E64, W64, b64 = E.astype(np.float64), W.astype(np.float64), b.astype(np.float64)
        x = E64 @ W64.T + b64
        y = multi_hot(LABELS, K)
        dx = (1 / (1 + np.exp(-x)) - y) / x.size
        for world in (1, 3):
            out = run(worker, ["--variant", "bce", "--embeddings", path("E.npy"), "--weights",
                               path("W.npy"), "--bias", path("b.npy"), "--labels", path("Y.npy")],
                      "bce", d, world)
            close(f"bce loss, world {world}", np.load(os.path.join(out, "loss.npy")), bce(x, y), 1e-6)
            close(f"bce grad_embeddings, world {world}",
                  np.load(os.path.join(out, "grad_embeddings.npy")), dx @ W64, 1e-5)
            close(f"bce grad_weights, world {world}",
                  np.load(os.path.join(out, "grad_weights.npy")), dx.T @ E64, 1e-5)
            close(f"bce grad_bias, world {world}", np.load(os.path.join(out, "grad_bias.npy")),
                  dx.sum(0), 1e-5)
        # LLCL on given projected label-level embeddings.
        tau = 0.3
        Z = rng.standard_normal((B, K, 3)).astype(np.float32)
        np.save(path("Z.npy"), Z)
        Z64 = Z.astype(np.float64)
        loss = llcl(Z64, LABELS, tau)
        grad = central(lambda v: llcl(v, LABELS, tau), Z64)
        for world in (1, 3):
            out = run(worker, ["--variant", "mulcon", "--embeddings", path("Z.npy"), "--labels",
                               path("Y.npy"), "--temperature", str(tau)], "llcl", d, world)
            close(f"llcl loss, world {world}", np.load(os.path.join(out, "loss.npy")), loss, 1e-5)
            close(f"llcl grad, world {world}", np.load(os.path.join(out, "grad_embeddings.npy")),
                  grad, 1e-4)
        # The whole head.
        C, D, dz, heads, P, gamma = 4, 6, 3, 2, 3, 0.5
        params = {k: (rng.standard_normal(s) * 0.4).astype(np.float32)
                  for k, s in head_shapes(C, K, D, dz).items()}
        write_safetensors(path("H.safetensors"), {"mulcon_head." + k: v for k, v in params.items()},
                          {"mulcon_head.heads": str(heads)})
        T = rng.standard_normal((B, P, C)).astype(np.float32)
        np.save(path("T.npy"), T)
        p64 = {k: v.astype(np.float64) for k, v in params.items()}
        T64 = T.astype(np.float64)
        f_tokens = lambda t: mulcon_loss(p64, t, LABELS, heads, tau, gamma)
        loss = f_tokens(T64)
        grad_t = central(f_tokens, T64)
        checked = ["label_embeddings", "label_attention.key.weight", "token_attention.norm1.weight",
                   "projector_out.weight", "classifier_bias"]
        grad_p = {}
        for name in checked:
            def f_param(v, name=name):
                q = dict(p64)
                q[name] = v
                return mulcon_loss(q, T64, LABELS, heads, tau, gamma)
            grad_p[name] = central(f_param, p64[name])
        for world in (1, 3):
            out = run(worker, ["--variant", "mulcon", "--tokens", path("T.npy"), "--head",
                               path("H.safetensors"), "--labels", path("Y.npy"), "--temperature",
                               str(tau), "--llcl-weight", str(gamma)], "mulcon head", d, world)
            close(f"mulcon loss, world {world}", np.load(os.path.join(out, "loss.npy")), loss, 1e-5)
            close(f"mulcon grad_tokens, world {world}",
                  np.load(os.path.join(out, "grad_tokens.npy")), grad_t, 1e-3)
            ours = read_safetensors(os.path.join(out, "grad_head.safetensors"))
            if set(ours) != {"mulcon_head." + k for k in params}:
                fail(f"grad_head.safetensors names {sorted(ours)}")
            for name in checked:
                close(f"mulcon grad {name}, world {world}", ours["mulcon_head." + name],
                      grad_p[name], 1e-3)
        # Refusals name the problem.
        bad = subprocess.run([worker, "loss-check", "--variant", "bce", "--embeddings",
                              path("E.npy"), "--weights", path("W.npy")[:-5] + "X.npy",
                              "--labels", path("Y.npy"), "--out", path("bad")],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "--weights" not in bad.stderr:
            fail(f"missing weights file: exit {bad.returncode}, {bad.stderr}")
        np.save(path("Ybig.npy"), np.array([[4]] * B, dtype=np.int64))
        bad = subprocess.run([worker, "loss-check", "--variant", "mulcon", "--embeddings",
                              path("Z.npy"), "--labels", path("Ybig.npy"), "--out", path("bad")],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "label 4 is >= the number of classes 4" not in bad.stderr:
            fail(f"label outside the classes: exit {bad.returncode}, {bad.stderr}")
    print("label_heads_oracle_test: every run agrees with the oracles")


if __name__ == "__main__":
    main()
