"""The torch twin of models.mnist_cnn.MnistCNN (same names, same maths): what `python -m engine
bench mnist` compares the engine's model with, tests/models/test_mnist.py too, and what
scripts/train_mnist.py trains. `TorchMnistCNN` is made, and torch imported, when it is first asked
for (this module ships in the page's wheel, where there is no torch)."""
from __future__ import annotations

import functools

from models.mnist_cnn import Config


def __getattr__(name: str):
    """`TorchMnistCNN`, the class, made (and torch imported) on first use."""
    if name != "TorchMnistCNN":
        raise AttributeError(name)
    return _twin_class()


@functools.cache
def _twin_class() -> type:
    import torch.nn as tnn
    import torch.nn.functional as tF

    class TorchMnistCNN(tnn.Module):
        """The torch twin of models.mnist_cnn.MnistCNN (same names, same maths)."""

        def __init__(self, config: Config = Config()):
            super().__init__()
            self.config = config
            c1, c2, c3, c4 = config.channels
            self.conv1, self.bn1 = tnn.Conv2d(1, c1, 3, padding=1, bias=False), tnn.BatchNorm2d(c1)
            self.conv2, self.bn2 = tnn.Conv2d(c1, c2, 3, padding=1, bias=False), tnn.BatchNorm2d(c2)
            self.conv3, self.bn3 = tnn.Conv2d(c2, c3, 3, padding=1, bias=False), tnn.BatchNorm2d(c3)
            self.conv4, self.bn4 = tnn.Conv2d(c3, c4, 3, padding=1, bias=False), tnn.BatchNorm2d(c4)
            self.fc1 = tnn.Linear(c4 * config.pooled ** 2, config.hidden)
            self.fc2 = tnn.Linear(config.hidden, config.num_classes)
            self.dropout = tnn.Dropout(0.3)

        def forward(self, x):
            x = tF.relu(self.bn1(self.conv1(x)))
            x = tF.max_pool2d(tF.relu(self.bn2(self.conv2(x))), 2)
            x = tF.relu(self.bn3(self.conv3(x)))
            x = tF.max_pool2d(tF.relu(self.bn4(self.conv4(x))), 2)
            x = tF.adaptive_avg_pool2d(x, self.config.pooled)
            x = self.dropout(tF.relu(self.fc1(x.flatten(1))))
            return self.fc2(x)
    return TorchMnistCNN
