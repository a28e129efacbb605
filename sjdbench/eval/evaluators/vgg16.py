"""VGG-16 fc2 features: the feature network of improved precision and recall.

Kynkäänniemi et al. embed images with an ImageNet-trained VGG-16 and take its second fully connected
layer (fc2, 4096-d). LANTERN's evaluation uses torchvision's VGG-16 (the `pretrained=True` weights,
`vgg16-397923af.pth`) and reads fc2 before its ReLU: the convolutional features, flattened, through
`classifier[:4]` (fc1, ReLU, dropout, fc2). Images arrive as 224 x 224 uint8 (imaging.for_vgg16)
and are scaled to [0, 1] and normalised with ImageNet's mean and standard deviation, as
torchvision's ToTensor and Normalize do.

The weights are never downloaded here: eval.precision_recall.weights, or torchvision's file in
$TORCH_HOME/hub/checkpoints/; missing, they fail at once with one line naming the file and where.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.feature_networks import local_weights

VGG16_FILE = "vgg16-397923af.pth"
VGG16_URL = f"https://download.pytorch.org/models/{VGG16_FILE}"
FC2_FEATURES = 4096
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def vgg16_weights(setting: str | None) -> Path:
    """The local VGG-16 weights file; one-line UserError when it is not on this machine."""
    return local_weights(
        setting, "eval.precision_recall.weights", VGG16_FILE, VGG16_URL, "precision/recall", "VGG-16", "torchvision's"
    )


class Vgg16Fc2(torch.nn.Module):
    """(N, 3, 224, 224) uint8 -> (N, 4096) float32 fc2 activations (before their ReLU)."""

    num_features = FC2_FEATURES
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, vgg: torch.nn.Module) -> None:
        super().__init__()
        self.features = cast(torch.nn.Module, vgg.features)
        self.fc1_to_fc2 = cast(torch.nn.Sequential, vgg.classifier)[:4]  # fc1, ReLU, dropout (identity in eval), fc2
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images.float() / 255.0 - self.mean) / self.std  # (N, 3, 224, 224)
        return self.fc1_to_fc2(torch.flatten(self.features(x), 1))  # (N, 512 * 7 * 7) -> (N, 4096)


def load_vgg16_fc2(weights: Path, device: str) -> Vgg16Fc2:
    """torchvision's VGG-16 with these weights (strictly: every key, no other), cut at fc2."""
    from torchvision.models import vgg16

    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle and zip errors: the file is not a state dict torch can read
        raise UserError(
            f"{weights} is not a readable VGG-16 state dict ({type(error).__name__}); pass torchvision's {VGG16_FILE}"
        ) from None
    with torch.device("meta"):  # no random initialisation of 138 M parameters that are overwritten anyway
        net = vgg16(weights=None)
    try:
        net.load_state_dict(state, assign=True)
    except (RuntimeError, TypeError, AttributeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{weights} is not torchvision's VGG-16 state dict ({first}); pass {VGG16_FILE}") from None
    return Vgg16Fc2(net).float().to(device).eval()  # float: a half-precision copy of the weights works too
