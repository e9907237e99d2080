"""Environments as dm_env: gymnasium adapted (`adapter`), Atari and MinAtar
(`atari`, `minatar`), the supported ids and their one validation
(`registry`), K environments stepped at once (`batched`). Knows nothing of
the agent."""
