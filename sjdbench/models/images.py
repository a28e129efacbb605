"""Pixels out of the VQ decoders every real model ends with."""

from __future__ import annotations

import numpy as np
import torch


def to_uint8(pixels: torch.Tensor) -> np.ndarray:
    """(3, H, W) or (H, W, 3) in [-1, 1] -> uint8 (H, W, 3), rounded to the nearest level."""
    if pixels.shape[0] == 3 and pixels.shape[-1] != 3:
        pixels = pixels.permute(1, 2, 0)
    scaled = (pixels.float().clamp(-1, 1) + 1) * 127.5
    return scaled.round().to(torch.uint8).cpu().numpy()
