"""The test suite; its folders mirror the package (``tests/sched/`` tests ``naspipe/sched/``), see tests/README.md."""
