#!/usr/bin/env python3
"""PyTorch side of bench/vit_speed.py: trains the reference ViT (the same
model pipetrain trains, tests/reference/model.py) on Fashion-MNIST batches in
file order with AdamW and gradient clipping, and prints samples/s over the
timed steps as JSON. usage: torch_vit.py THREADS STEPS WARMUP BATCH DATA_DIR"""
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import model as M  # noqa: E402


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = np.frombuffer(data[4:4 + 4 * ndim], dtype=">u4")
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def main():
    threads, steps, warmup, batch = (int(a) for a in sys.argv[1:5])
    data_dir = sys.argv[5]
    torch.set_num_threads(threads)
    images = idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    labels = idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.tensor(((images / 255.0 - 0.2860) / 0.3530).astype(np.float32)).unsqueeze(1)
    y = torch.tensor(labels.astype(np.int64))
    torch.manual_seed(1)
    model = M.PipetrainViT(64, 6, 4, 256, 1, 28, 7, 10)
    decay = [p for n, p in model.named_parameters() if M.decays(n, p)]
    other = [p for n, p in model.named_parameters() if not M.decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": other, "weight_decay": 0.0}], lr=1e-3)
    start = None
    for step in range(steps):
        if step == warmup:
            start = time.perf_counter()
        i = step * batch % (len(x) - batch)
        loss = F.cross_entropy(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": (steps - warmup) * batch / elapsed, "loss": loss.item()}))


if __name__ == "__main__":
    main()
