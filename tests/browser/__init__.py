"""The notebooks and the report in a real browser (JupyterLab and chromium)."""
