"""acme_impala: IMPALA and LASER agents for Acme, Reverb and Launchpad."""

import os as _os

# TensorFlow must start in eager mode in every thread. When it is first
# imported inside absl's app.run (programs/ import it lazily, after flag
# parsing), TF 2.8 creates its eager context during `import tensorflow`
# (tf.distribute registers an absl `call_after_init` hook that then runs at
# once) before enabling TF2 behaviour, so the context starts in graph mode and
# threads started later (the nodes of a local_mt/test_mt program) lack the
# eager entry that `tf.init_scope` looks for. Functions created while tracing
# a tf.function in such a thread (nested tf.functions, tf.scan bodies) then
# land in the global graph, and the call fails with "Can't find a function".
# TensorFlow sets this variable itself on import; setting it first makes the
# context eager from its creation. Child processes inherit it.
_os.environ.setdefault('TF2_BEHAVIOR', '1')

# TF 2.8 leaves its oneDNN graph rewrites and kernels off by default; on
# these CPUs they make the learner step 2.2x faster on the shallow Atari net
# and 1.07x on CartPole's (benchmarks/learner_bench.py, both settings in one
# run). TensorFlow reads the variable when it loads, so it is set here,
# before any import of it; child processes (every node) inherit it, and a
# user's own TF_ENABLE_ONEDNN_OPTS=0 wins.
_os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

# With oneDNN off, TensorFlow's CPU allocator is malloc: the learner's
# tensors of tens of MB (an Atari batch's frames, the first layer's
# activations) are above glibc's largest mmap threshold, so each step maps
# fresh pages and faults them in. TensorFlow's BFC allocator keeps and reuses
# them, as oneDNN's allocator does when oneDNN is on. The shallow torso's
# matmuls (networks.space_to_depth_conv2d_bias_relu) cut its forward and
# backward pass by 4 % without it, by 35 % with it (docs/benchmarks.md,
# Learner). Read at the first allocation; a user's own value wins.
if _os.environ['TF_ENABLE_ONEDNN_OPTS'].strip().lower() not in ('1', 'true'):
  _os.environ.setdefault('TF_CPU_ALLOCATOR_USE_BFC', 'true')

# TF 2.8's oneDNN (v2.5) runs a bfloat16 convolution's weight gradient on a
# CPU's AMX units with a kernel whose threads wait for each other in a spin
# barrier; on TensorFlow's thread pool, which runs a task only when a thread
# is free, it deadlocks when every pool thread is already busy (two gradients
# at once, or the learner's update run by tf.data on that pool): the
# bfloat16 learner hung in about half of its runs on a 2-core Intel Xeon with
# AMX (gdb: jit_avx512_core_amx_convolution_bwd_weights_t). Capping oneDNN
# at AVX-512 BF16 keeps bfloat16 on the kernels AMD's CPUs run, which never
# hung. oneDNN reads the variable at its first primitive; a user's own value
# wins, and with AMX allowed a bfloat16 torso is refused
# (agent/networks.validate_torso_dtype).
_os.environ.setdefault('ONEDNN_MAX_CPU_ISA', 'AVX512_CORE_BF16')

# A node process started by exec from a quiet launcher (Launchpad's
# process_entry, a Kubernetes pod) silences TensorFlow's and gym's start-up
# noise before it imports them (host/quiet.py); importing acme_impala as a
# library changes nothing.
if _os.environ.get('ACME_IMPALA_QUIET') == '1':
  from acme_impala.host import quiet as _quiet
  _quiet.silence()

# The public API, imported on first use: `import acme_impala` stays cheap (a
# program's --help does not pay for TensorFlow), and
# `acme_impala.IMPALALearner` works as an attribute.
_EXPORTS = {
    'IMPALAConfig': 'agent.config',
    'ConfigError': 'agent.config',
    'get_config': 'agent.presets',
    'IMPALABuilder': 'agent.builder',
    'IMPALALearner': 'agent.learning',
    'IMPALAActor': 'agent.acting',
    'BatchedIMPALAActor': 'agent.acting',
    'TrajectoryAdder': 'agent.adders',
    'BatchedTrajectoryAdder': 'agent.adders',
    'IMPALA': 'agent.agent',
    'Batch': 'agent.types',
    'RunOptions': 'distributed.program',
    'prepare_run': 'distributed.program',
    'build_program': 'distributed.program',
    'make_program': 'distributed.program',
    'make_sweep_program': 'distributed.sweep',
    'launch_and_wait': 'launch.local',
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  import importlib  # pylint: disable=g-import-not-at-top
  value = getattr(importlib.import_module(f'{__name__}.{_EXPORTS[name]}'),
                  name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS))
