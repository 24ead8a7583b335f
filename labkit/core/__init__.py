"""The kit's own idioms, used by every layer: the registry, owned processes, the runs/ root, the
exercises' reference implementations. Imports nothing from the rest of labkit."""
