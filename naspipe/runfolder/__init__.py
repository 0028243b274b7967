"""What a run folder holds: its kind and identity (``runs``), losses and parameter digests and the bit-for-bit
comparison (``results``), and the lock that keeps a second writer out (``runlock``). Trained weights for search
are the models' own (``naspipe.models.weights``).
"""
