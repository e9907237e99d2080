"""Running the program graph on Kubernetes: one pod per node.

`naming` (DNS-1123 names and the address map), `manifests` (the objects
`programs/impala_k8s.py render` writes, and the lints they must pass),
`node` (the per-pod entry, `python -m acme_impala.launch.k8s.node`).
"""
