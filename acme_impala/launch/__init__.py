"""How a built program is run and watched: locally (`local`, `supervisor`),
one node given where the others are (`node_runner`), on Kubernetes (`k8s`);
the programs' flags (`program_flags`, `config_flags`), the progress line
(`progress`) and the curves of a run (`curves`, `plots`)."""
