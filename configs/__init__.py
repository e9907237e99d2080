"""The presets of `--config`: one file per preset, each with `get_config()`.

Loaded by name or path through `acme_impala.agent.presets`; installed with
the package as `acme_impala/configs/` (setup.py).
"""
