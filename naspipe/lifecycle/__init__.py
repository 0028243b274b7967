"""How naspipe's own processes start and how their failures explain themselves: which CPU kernels they compute
with (``kernels``), start-up imports made with the garbage collector paused (``startup``), starting a process
without running the caller's ``__main__`` again (``mainless``), one walk of an exception's chain
(``exception_chain``), and torch's intra-op thread count for one piece of work, given back after it (``threads``).
"""
