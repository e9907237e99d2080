"""IMPALA on Kubernetes: one pod per node, Indexed Jobs found by DNS.

  python programs/impala_k8s.py render --run_name=cp1 \\
      --image=REGION-docker.pkg.dev/PROJECT/REPO/acme-impala:TAG \\
      --resources=resources.yaml --output=manifests/ [program flags]
  python programs/impala_k8s.py apply  --run_name=cp1 --image=... [flags]
  python programs/impala_k8s.py status --run_name=cp1
  python programs/impala_k8s.py stop   --run_name=cp1

The program flags are those of `programs/impala_lp.py` (`--config`,
`--config.<field>`, `--num_actors`, `--max_actor_steps`, `--seed`,
`--restore`, `--evaluator`); `--logdir` is a path on the run's shared volume
(default /data/<run_name>). `render` writes DIR/<run_name>.yaml after
checking it against Kubernetes' schemas (strict) and the cross-field lints;
`apply`, `status` and `stop` run `kubectl`. See docs/gke.md.
"""

import json
import os
import subprocess
import sys
import time

from acme_impala.host import quiet
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from acme_impala.launch import config_flags
from acme_impala.launch import program_flags
from acme_impala.launch.k8s import manifests
from acme_impala.launch.k8s import naming

SUBCOMMANDS = ('render', 'apply', 'status', 'stop')
FLAGS = flags.FLAGS
program_flags.define()
flags.DEFINE_string('run_name', None, 'Name of the run: prefixes every '
                    'Kubernetes object (1-30 chars, a DNS label).')
flags.DEFINE_string('image', None, 'Container image of every node (those '
                    'with an accelerator: --gpu_image).')
flags.DEFINE_string('gpu_image', None,
                    'Container image of the groups the resources file gives '
                    'an accelerator (the learner): the Dockerfile\'s gpu '
                    'target, built from the same pins.')
flags.DEFINE_string('namespace', 'default', 'Kubernetes namespace.')
flags.DEFINE_string('resources', None,
                    'YAML file: per-group requests/limits, nodeSelector, '
                    'tolerations, backoffLimitPerIndex, and the volume\'s '
                    'storage (see docs/gke.md).')
flags.DEFINE_string('output', None, 'render: directory for <run_name>.yaml.')
flags.DEFINE_string('attempt', None, 'Id of this launch (names its stop '
                    'marker); default a UTC time stamp.')
flags.DEFINE_integer('termination_notice_s', 30,
                     'Launchpad termination notice inside the pods.')
flags.DEFINE_string('kubectl', 'kubectl', 'The kubectl binary.')
flags.DEFINE_integer('stop_timeout_s', 600,
                     'stop: how long to wait for the Jobs to complete.')


def _fail(message: str, code: int = 2):
  print(f'impala_k8s: error: {message}', file=sys.stderr)
  sys.exit(code)


def _load_resources():
  if not FLAGS.resources:
    return {}
  import yaml  # pylint: disable=g-import-not-at-top
  try:
    with open(FLAGS.resources) as f:
      return yaml.safe_load(f) or {}
  except (OSError, yaml.YAMLError) as error:
    _fail(f'--resources={FLAGS.resources!r}: {error}')


def _checked_inputs(overrides):
  """(logdir, attempt, resources) of a render, every value checked that
  needs no TensorFlow (the configs too); raises ValueError naming a bad
  one."""
  naming.validate_run_name(FLAGS.run_name)
  logdir = FLAGS.logdir or f'{manifests.MOUNT_PATH}/{FLAGS.run_name}'
  if not logdir.startswith(manifests.MOUNT_PATH + '/'):
    raise ValueError(f'--logdir={logdir!r}: on Kubernetes the logdir is on '
                     f'the run\'s volume, under {manifests.MOUNT_PATH}/.')
  attempt = FLAGS.attempt or time.strftime('a%Y%m%d-%H%M%S', time.gmtime())
  if not naming.is_dns_label(attempt):
    raise ValueError(f'--attempt={attempt!r}: expected a DNS label.')
  program_flags.checked_configs(overrides)
  resources = manifests.validate_resources(_load_resources())
  if manifests.accelerator_of(resources, 'learner') and not FLAGS.gpu_image:
    raise ValueError('--gpu_image is missing: the resources file gives the '
                     'learner an accelerator, which runs the GPU image '
                     '(docker build --target gpu; docs/gke.md).')
  return logdir, attempt, resources


def render_objects(overrides):
  """The run's objects from the flags; exits 2 naming a bad value (those
  that need no TensorFlow before it loads: in well under a second)."""
  try:
    logdir, attempt, resources = _checked_inputs(overrides)
  except (ValueError, TypeError) as error:
    _fail(str(error))
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.launch import node_runner  # pylint: disable=g-import-not-at-top
  try:
    run = program_flags.prepare(overrides, logdir, launcher=False)
    sizes = node_runner.group_sizes(program_lib.build_program(run))
    objects = manifests.render(
        FLAGS.run_name, FLAGS.image, FLAGS.namespace, sizes,
        program_flags.forward(overrides, logdir), resources, attempt,
        FLAGS.termination_notice_s, gpu_image=FLAGS.gpu_image)
  except (ValueError, TypeError) as error:
    _fail(str(error))
  problems = (manifests.schema_errors(objects) +
              manifests.lint(objects, sizes, FLAGS.termination_notice_s))
  if problems:
    _fail('the rendered manifests are invalid (a bug):\n  ' +
          '\n  '.join(problems), code=1)
  return objects, sizes


def write_yaml(objects, path):
  import yaml  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'w') as f:
    yaml.safe_dump_all(objects, f, sort_keys=False)


def _kubectl(*args, check=True, capture=False):
  cmd = [FLAGS.kubectl, '--namespace', FLAGS.namespace] + list(args)
  print('+ ' + ' '.join(cmd), flush=True)
  result = subprocess.run(cmd, text=True,
                          stdout=subprocess.PIPE if capture else None)
  if check and result.returncode != 0:
    _fail(f'{" ".join(cmd)} exited with status {result.returncode}.', 1)
  return result


def _selector():
  return manifests.run_selector(FLAGS.run_name)


def _jobs():
  result = _kubectl('get', 'jobs', '-l', _selector(), '-o', 'json',
                    capture=True)
  return json.loads(result.stdout or '{"items": []}')['items']


def _subcommand(argv):
  """The subcommand of an argv whose flags are parsed; exits 2 unless there
  is exactly one."""
  if len(argv) != 2 or argv[1] not in SUBCOMMANDS:
    _fail(f'expected one subcommand of {list(SUBCOMMANDS)}, got {argv[1:]}.')
  return argv[1]


def _check_subcommand_flags(command):
  if command in ('render', 'apply') and not FLAGS.image:
    _fail('--image is required.')
  if not FLAGS.run_name:
    _fail('--run_name is required.')
  if command == 'render' and not FLAGS.output:
    _fail('render needs --output=DIR.')


def main(argv, overrides):
  command = _subcommand(argv)
  _check_subcommand_flags(command)
  if command == 'render':
    start = time.time()
    objects, sizes = render_objects(overrides)
    path = os.path.join(FLAGS.output, f'{FLAGS.run_name}.yaml')
    write_yaml(objects, path)
    print(f'impala_k8s: wrote {len(objects)} objects for '
          f'{sum(sizes.values())} nodes in {len(sizes)} groups to {path} '
          f'({time.time() - start:.1f} s).')
    for flag in ('image', 'gpu_image'):
      value = FLAGS[flag].value
      if value and not manifests.has_digest(value):
        print(f'impala_k8s: note: --{flag}={value} is a tag, which can '
              'move; an image digest (...@sha256:<64 hex>) pins what every '
              'pod runs (docs/gke.md).')
    return 0
  if command == 'apply':
    active = [j['metadata']['name'] for j in _jobs()
              if j.get('status', {}).get('active')]
    if active:
      _fail(f'run {FLAGS.run_name!r} has active Jobs {active}; stop it first '
            '(impala_k8s.py stop).', 1)
    objects, _ = render_objects(overrides)
    path = os.path.join(FLAGS.output or '.', f'{FLAGS.run_name}.yaml')
    write_yaml(objects, path)
    # A Job's pod template cannot change: the finished Jobs of an earlier
    # attempt are replaced (the volume, and so the checkpoints, stay).
    _kubectl('delete', 'jobs', '-l', _selector(), '--ignore-not-found',
             '--wait=true')
    _kubectl('apply', '-f', path)
    return 0
  if command == 'status':
    for job in _jobs():
      status = job.get('status', {})
      print(f'{job["metadata"]["name"]}: {job["spec"]["completions"]} nodes, '
            f'active {status.get("active", 0)}, succeeded '
            f'{status.get("succeeded", 0)}, failed {status.get("failed", 0)}'
            f', failed indexes {status.get("failedIndexes", "none")}')
    _kubectl('get', 'pods', '-l', _selector(), '-o', 'wide', check=False)
    return 0
  # stop: the coordinator's pod writes this attempt's stop marker on the
  # shared volume; every pod sees it, checkpoints and exits 0.
  jobs = _jobs()
  coordinators = [j for j in jobs if j['metadata']['labels'].get(
      manifests.GROUP_LABEL) == 'coordinator']
  if not coordinators:
    _fail(f'run {FLAGS.run_name!r} has no coordinator Job.', 1)
  job = coordinators[0]
  attempt = job['metadata']['annotations']['acme-impala/attempt']
  command_line = job['spec']['template']['spec']['containers'][0]['command']
  logdir = next(a.split('=', 1)[1] for a in command_line
                if a.startswith('--logdir='))
  status = f'{logdir}/status'
  # kubectl exec passes each argument to the container as it is, with no
  # shell: a logdir with spaces or ';' stays one path.
  _kubectl('exec', f'job/{job["metadata"]["name"]}', '--', 'mkdir', '-p',
           '--', status)
  _kubectl('exec', f'job/{job["metadata"]["name"]}', '--', 'touch', '--',
           f'{status}/stop-{attempt}')
  _kubectl('wait', '--for=condition=complete', 'jobs', '-l', _selector(),
           f'--timeout={FLAGS.stop_timeout_s}s')
  return 0


def run():
  argv, overrides_text = config_flags.split_config_overrides(sys.argv)

  def _main(argv):
    try:
      overrides = config_flags.parse_overrides(overrides_text)
    except ValueError as error:
      _fail(str(error))
    sys.exit(main(argv, overrides))

  app.run(_main, argv=argv,
          flags_parser=program_flags.flags_parser('impala_k8s'))


if __name__ == '__main__':
  run()
