"""Shared test code: user modules found by name on PYTHONPATH (``--space user_supernets:good``) and helpers
(notebook runner, network namespaces, process checks). ``tests/conftest.py`` puts this folder on ``sys.path``."""
