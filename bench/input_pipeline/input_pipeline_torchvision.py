"""Input-pipeline benchmark, torchvision side (run_input_pipeline.sh runs it after the C++ side).

Usage: input_pipeline_torchvision.py DIR [--workers 2] [--batch 64] [--epochs 3] [--out F]

Measures on the same ImageFolder tree:
  loader   torchvision.datasets.ImageFolder (PIL loader) + Compose([RandomResizedCrop(224),
           RandomHorizontalFlip(), ToTensor(), Normalize(CLIP)]) + DataLoader(num_workers,
           batch_size, shuffle=True, persistent_workers): images/s after one warm-up epoch, and
           images per CPU-second of the main process and its workers (from /proc);
  pil      PIL's decode alone (Image.open + convert("RGB")) on one thread;
  stages   one thread, no loader: time per image in decode, RandomResizedCrop + flip (PIL),
           ToTensor (conversion) and Normalize, so the shares can be set beside the C++ ones.
Prints one JSON object (and writes it to --out).
"""
import argparse
import json
import os
import time

import torch
import torchvision
from PIL import Image
from torchvision import transforms as T

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def loader_run(root, workers, batch, epochs, size):
    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(CLIP_MEAN, CLIP_STD)])
    data = torchvision.datasets.ImageFolder(root, transform=tf)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True,
                                         num_workers=workers, persistent_workers=workers > 0)
    it = iter(loader)
    for _ in it:  # warm-up epoch: worker start-up, page cache
        pass
    pids = [os.getpid()] + [w.pid for w in getattr(it, "_workers", [])]
    c0 = sum(cpu_seconds(p) for p in pids)
    t0 = time.perf_counter()
    images = 0
    for _ in range(epochs):
        for x, _ in loader:
            images += x.shape[0]
    wall = time.perf_counter() - t0
    cpu = sum(cpu_seconds(p) for p in pids) - c0
    return {"images": images, "wall_seconds": wall, "cpu_seconds": cpu,
            "images_per_second": images / wall, "images_per_cpu_second": images / cpu,
            "cpu_ms_per_image": 1e3 * cpu / images, "workers": workers, "batch": batch}


def paths_of(root):
    return [p for p, _ in torchvision.datasets.ImageFolder(root).samples]


def pil_decode(paths, rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for p in paths:
            with open(p, "rb") as f:
                Image.open(f).convert("RGB")
    n = len(paths) * rounds
    return {"images": n, "images_per_second": n / (time.perf_counter() - t0),
            "images_per_cpu_second": n / (time.process_time() - c0)}


def stages(paths, size):
    crop, flip = T.RandomResizedCrop(size), T.RandomHorizontalFlip()
    to_tensor, norm = T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)
    t = {"decode": 0.0, "crop_resize_flip": 0.0, "to_tensor": 0.0, "normalize": 0.0}
    for p in paths:
        c0 = time.process_time()
        with open(p, "rb") as f:
            img = Image.open(f).convert("RGB")
        c1 = time.process_time()
        img = flip(crop(img))
        c2 = time.process_time()
        x = to_tensor(img)
        c3 = time.process_time()
        norm(x)
        c4 = time.process_time()
        for k, dt in zip(t, (c1 - c0, c2 - c1, c3 - c2, c4 - c3)):
            t[k] += dt
    total = sum(t.values())
    return {"ms_per_image": {k: 1e3 * v / len(paths) for k, v in t.items()},
            "share": {k: v / total for k, v in t.items()},
            "images_per_cpu_second": len(paths) / total}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    paths = paths_of(args.root)
    result = {
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "pil": Image.__version__,
        "loader": loader_run(args.root, args.workers, args.batch, args.epochs, args.image_size),
        "pil_decode_one_thread": pil_decode(paths, 2),
        "stages_one_thread": stages(paths, args.image_size),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
