"""The notebooks in ``notebooks/`` run headless with small parameters and are committed clean."""
