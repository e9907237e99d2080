"""The Launchpad program graph: the nodes (`nodes`), the pure
`program.build_program`, sweeps as a program of K agents (`sweep`), the
nodes' failure and stop protocol (`lifecycle`), loggers and the run's
record (`run_record`). Builds programs; runs none."""
