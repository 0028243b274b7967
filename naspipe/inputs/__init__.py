"""What users type, read strictly with one-line errors: whole numbers (``wholes``), byte sizes and memory
budgets (``memsize``), optimizer names and their default rates (``optim_names``), the names of what a command
writes (``paths``). No torch, so the
command line checks its arguments before torch loads.
"""
