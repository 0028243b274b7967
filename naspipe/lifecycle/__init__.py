"""How naspipe's own processes start and how their failures explain themselves: which CPU kernels they compute
with (``kernels``), start-up imports made with the garbage collector paused (``startup``), starting a process
without running the caller's ``__main__`` again (``mainless``), and one walk of an exception's chain
(``exception_chain``).
"""
