"""When and how a subnet's gradients become weight updates on one stage: the protocol (``updates``), the rule a
policy's key names (``rules``), the asynchronous baselines' rules (``async_rules``) and the versions of the
shared fixed-block weights (``versions``).

Why it exists: the update rules are a stage's arithmetic, the same in one process (``naspipe.runtime.replay``)
and in many; they import nothing from processes or transport (an import-linter contract).
"""
