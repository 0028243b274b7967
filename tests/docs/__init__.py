"""Tests of the documentation: the code blocks of README.md and docs/ run."""
