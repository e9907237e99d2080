"""The names of the batched engines (`config.env_engine`), stdlib only so
that the config can read them without importing an engine."""

GYMNASIUM = 'gymnasium'  # K gymnasium environments stepped in Python.
ENVPOOL = 'envpool'  # One EnvPool of K C++ environments (envpool==0.8.4).
ENGINES = (GYMNASIUM, ENVPOOL)
