"""The test suite; its folders mirror the package (``tests/sched/`` tests ``naspipe/sched/``): docs/testing.md."""
