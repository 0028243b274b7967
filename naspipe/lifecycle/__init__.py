"""How naspipe's own processes start and how their failures explain themselves: start-up imports made
with the garbage collector paused (``startup``), and one walk of an exception's chain
(``exception_chain``).
"""
