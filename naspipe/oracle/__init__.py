"""The oracle: the independent sequential trainer (``sequential_trainer``) that every parallel run must
match bit for bit; ``naspipe.reference(...)`` and ``naspipe reference`` write its run folder.
"""
