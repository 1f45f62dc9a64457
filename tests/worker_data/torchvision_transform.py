"""The other side of worker_image_transform_test: torchvision's transforms on the same pixels.

Usage: torchvision_transform.py S DIR H W C [DIR H W C ...]
For each DIR: reads DIR/image.bin (H x W x C uint8, HWC) and DIR/cases.txt, one case a line:
  train TOP LEFT HEIGHT WIDTH FLIP   -> F.resized_crop(..., [S, S], BILINEAR, antialias=True)
                                        (+ F.hflip when FLIP is 1)
  eval RESIZE                        -> F.center_crop(F.resize(..., RESIZE, BILINEAR,
                                        antialias=True), S)
then ToTensor's scaling and Normalize with CLIP's mean / std (their average for 1 channel),
and writes DIR/out_<i>.bin (float32 C x S x S) for case i. The image stays float from the
start (the tensor path), so the comparison shows the filter, not PIL's uint8 rounding.
"""
import sys

import numpy as np
import torch
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def run(d, h, w, c, s):
    pixels = np.fromfile(f"{d}/image.bin", dtype=np.uint8).reshape(h, w, c)
    img = torch.from_numpy(pixels.astype(np.float32)).permute(2, 0, 1).contiguous()
    mean, std = (CLIP_MEAN, CLIP_STD) if c == 3 else ([sum(CLIP_MEAN) / 3], [sum(CLIP_STD) / 3])
    bilinear = InterpolationMode.BILINEAR
    with open(f"{d}/cases.txt") as f:
        cases = [line.split() for line in f if line.strip()]
    for i, case in enumerate(cases):
        if case[0] == "train":
            top, left, ch, cw, flip = map(int, case[1:])
            out = F.resized_crop(img, top, left, ch, cw, [s, s], bilinear, antialias=True)
            if flip:
                out = F.hflip(out)
        else:
            out = F.center_crop(F.resize(img, int(case[1]), bilinear, antialias=True), s)
        out = F.normalize(out / 255.0, mean, std)
        out.numpy().astype(np.float32).tofile(f"{d}/out_{i}.bin")


def main():
    s, rest = int(sys.argv[1]), sys.argv[2:]
    for k in range(0, len(rest), 4):
        run(rest[k], *map(int, rest[k + 1:k + 4]), s)

if __name__ == "__main__":
    main()
