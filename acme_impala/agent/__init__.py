"""What IMPALA and LASER are, in Acme's agent-folder shape: the config and
its validation (`config`, presets in `presets`), the maths (`vtrace`,
`losses`, `trust_region`), `networks`, `acting`, `adders`, `learning`, the
builder (`builder`) and its data pipeline (`datasets`), the batched
environment loop (`loops`), the single-process agent (`agent`) and `export`.
Imports nothing of Launchpad or of processes."""
