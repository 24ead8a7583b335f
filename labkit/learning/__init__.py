"""The models and how they train: Lab 1's LR trainers, Lab 3's sparse LR, the strategy training loop
and its epochs, the Keras models, Lab 5's cost model."""
