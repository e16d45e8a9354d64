"""Training stage: a small, deterministic PyTorch training loop for classifiers on NHWC numpy datasets.

Used by the demo, the accuracy tests and (later) search; it is deliberately plain: Adam, cross-entropy, fixed seed,
a progress bar when asked.
"""

from __future__ import annotations

import numpy as np


def to_nchw_tensor(x: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def train_classifier(module, x: np.ndarray, y: np.ndarray, *, epochs: int = 3, batch_size: int = 64,
                     lr: float = 2e-3, seed: int = 0, progress: bool = False):
    """Train `module` in place on NHWC images `x` (float32) with labels `y`; returns the module in eval mode."""
    import torch
    from tqdm import tqdm

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    xt, yt = to_nchw_tensor(x), torch.from_numpy(y.astype(np.int64))
    steps = epochs * ((len(x) + batch_size - 1) // batch_size)
    bar = tqdm(total=steps, desc="training", unit="step", disable=not progress, leave=False)
    module.train()
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        for i in range(0, len(x), batch_size):
            idx = order[i:i + batch_size]
            opt.zero_grad()
            loss = loss_fn(module(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    return module.eval()


def float_accuracy(module, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> float:
    """Top-1 accuracy of a torch module on NHWC images."""
    import torch

    module.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = module(to_nchw_tensor(x[i:i + batch_size]))
            correct += int((logits.argmax(1).numpy() == y[i:i + batch_size]).sum())
    return correct / len(x)
