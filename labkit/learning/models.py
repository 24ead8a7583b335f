"""The Keras models the labs train. Each builder is seeded so runs are reproducible."""

from __future__ import annotations

import keras
from keras import layers


def softmax_regression(num_classes: int = 10, input_shape=(28, 28), seed: int = 0) -> keras.Model:
    """Multinomial logistic regression: flatten, one dense layer, logits out (784*10+10 = 7,850 weights).

    Weights start from small random normals ("random initialization" in the reports).
    """
    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Flatten(),
            layers.Dense(
                num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01, seed=seed), name="logits"
            ),
        ],
        name="softmax_regression",
    )


def lenet5(num_classes: int = 10, activation: str = "relu", pooling: str = "max", seed: int = 0) -> keras.Model:
    """LeNet-5 for 28x28 inputs: conv 6@5x5 (same) - pool - conv 16@5x5 - pool - 120 - 84 - logits.

    ReLU and max pooling are the defaults: they train faster with plain SGD than the
    original tanh / average pooling, which remain one argument away. 61,706 weights.
    Measured: SGD at learning rate 0.05, batch 50, reaches 98.8% MNIST test accuracy after
    5 epochs; a global batch of 600 (3 workers x 200) first passes 98.5% after 25 epochs.
    """
    pool = {"max": layers.MaxPooling2D, "avg": layers.AveragePooling2D}[pooling]
    init = lambda i: keras.initializers.GlorotUniform(seed=seed + i)  # noqa: E731
    return keras.Sequential(
        [
            keras.Input((28, 28)),
            layers.Reshape((28, 28, 1)),
            layers.Conv2D(6, 5, padding="same", activation=activation, kernel_initializer=init(0)),
            pool(2),
            layers.Conv2D(16, 5, activation=activation, kernel_initializer=init(1)),
            pool(2),
            layers.Flatten(),
            layers.Dense(120, activation=activation, kernel_initializer=init(2)),
            layers.Dense(84, activation=activation, kernel_initializer=init(3)),
            layers.Dense(num_classes, kernel_initializer=init(4), name="logits"),
        ],
        name="lenet5",
    )


def lenet5_tanh_avg(num_classes: int = 10, seed: int = 0) -> keras.Model:
    """LeNet-5 with LeCun's tanh and average pooling (the same 61,706 weights): the model
    report 002 tried first and found slower to train with SGD than ReLU (about 50 epochs to
    90% against 20). Lab 4's ``model`` option."""
    model = lenet5(num_classes, activation="tanh", pooling="avg", seed=seed)
    model.name = "lenet5_tanh_avg"
    return model


def mlp(hidden=(2048, 2048), num_classes: int = 10, seed: int = 0) -> keras.Model:
    """A communication-heavy MLP (784-2048-2048-10: 5.8M weights, 23 MB) for Lab 5."""
    stack = [keras.Input((28, 28)), layers.Flatten()]
    stack += [
        layers.Dense(h, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=seed + i))
        for i, h in enumerate(hidden)
    ]
    stack.append(
        layers.Dense(
            num_classes, kernel_initializer=keras.initializers.GlorotUniform(seed=seed + len(hidden)), name="logits"
        )
    )
    return keras.Sequential(stack, name="mlp_" + "x".join(map(str, hidden)))


def cifar_cnn(num_classes: int = 10, seed: int = 0) -> keras.Model:
    """A CIFAR-10-scale CNN for 32x32x3 images (Lab 5's measured counterpart of report 003):
    conv 32-32, pool, conv 64-64, pool (3x3 kernels, no padding), dense 1024, logits: the classic
    small CIFAR-10 network. 1,715,242 weights, M = 6.9 MB, most of them in the dense layer; most
    of the compute is in the convolutions. It trains on synthetic images (``INPUT_SHAPES``)."""
    init = lambda i: keras.initializers.GlorotUniform(seed=seed + i)  # noqa: E731
    stack = [keras.Input(INPUT_SHAPES["cifar_cnn"])]
    for i, filters in enumerate((32, 32, 64, 64)):
        stack.append(layers.Conv2D(filters, 3, activation="relu", kernel_initializer=init(i)))
        if i % 2:
            stack.append(layers.MaxPooling2D(2))
    stack += [
        layers.Flatten(),
        layers.Dense(1024, activation="relu", kernel_initializer=init(4)),
        layers.Dense(num_classes, kernel_initializer=init(5), name="logits"),
    ]
    return keras.Sequential(stack, name="cifar_cnn")


MODELS = {
    "softmax_regression": softmax_regression,
    "lenet5": lenet5,
    "lenet5_tanh_avg": lenet5_tanh_avg,
    "mlp": mlp,
    "cifar_cnn": cifar_cnn,
}
# The images a model reads, where not MNIST's 28x28: the task programs give it synthetic images of this shape
# (labkit.datasets.loaders.synthetic_images), since throughput does not depend on the pixels.
INPUT_SHAPES = {"cifar_cnn": (32, 32, 3)}


def build(name: str, **kwargs) -> keras.Model:
    """A model by name, for task programs that get it from the command line."""
    try:
        return MODELS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None


def model_bytes(model: keras.Model) -> int:
    """Bytes of the trainable weights (float32): the M of the communication formulas."""
    return sum(int(w.numpy().nbytes) for w in model.trainable_weights)
