"""The models and how they train: Lab 1's LR trainers, Lab 3's sparse LR, the strategy training loop
and its epochs, the Keras models, Lab 5's cost model; below them, the pieces the exercises' reference
answers share with them (``ops``: losses and batch arithmetic; ``costargs``: the cost model's checked
arguments)."""
