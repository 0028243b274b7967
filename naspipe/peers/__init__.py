"""The training setups researchers use today instead of a CSP pipeline, runnable beside it (``ddp``)."""
