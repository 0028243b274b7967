"""Subnet sequences: the order in which subnets are trained (seeded streams, replay files, the bounded
window), the samplers that make them (uniform, strict-fair, conflict-spreading, run-time generated
from losses) and a sequence's conflict structure. No torch.
"""
