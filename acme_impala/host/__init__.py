"""The machine and the process: CPU facts (`hardware`) and quiet start-up
of TensorFlow and friends (`quiet`). Imports nothing of the project."""
