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
