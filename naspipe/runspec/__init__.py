"""What a run is, declared once (``spec.RunSpec``): space, partition, sequence, shared layers, policy,
window and seed, with their defaults and one-line errors; the commands and the library share it.
No torch.
"""
