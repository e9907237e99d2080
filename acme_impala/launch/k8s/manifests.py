"""The Kubernetes objects of one run, and the checks they must pass.

Per Launchpad group: a headless Service and an Indexed Job (one pod per
node, `completions = parallelism =` the group's node count). For the run:
one NetworkPolicy admitting only the run's own pods (courier has no
authentication and unpickles named classes: an open port would be remote
code execution) and one ReadWriteMany PersistentVolumeClaim for the logdir
(checkpoints, logs, the stop marker).

Why each Job field:
  - `backoffLimitPerIndex`: a node replaced too often fails its index (and
    the Job), instead of one flaky actor using up the whole Job's budget.
  - `podReplacementPolicy: Failed`: a replacement starts only once the old
    pod has terminated, so two learners never write one checkpoint
    directory.
  - `podFailurePolicy`: disruptions (preemption, eviction, drain: the
    DisruptionTarget condition) are ignored (the pod is replaced without
    counting); the node-failed exit code fails the Job (a bug would fail
    again); anything else (143 after an unexplained SIGTERM, a kill) counts
    against the index's backoff.
  - `restartPolicy: Never`: the Job, not the kubelet, decides, and the pod's
    exit status reaches the podFailurePolicy.
  - termination grace > Launchpad's termination notice + time for the final
    checkpoint, so a stopping learner is not killed mid-save.
"""

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from acme_impala.distributed import lifecycle
from acme_impala.launch.k8s import naming

NAME_LABEL = 'app.kubernetes.io/name'
APP_NAME = 'acme-impala'  # NAME_LABEL's value on every object of a run.
RUN_LABEL = 'app.kubernetes.io/instance'
GROUP_LABEL = 'acme-impala/group'
CONTAINER = 'node'
VOLUME = 'logdir'
MOUNT_PATH = '/data'
TMP_VOLUME = 'tmp'
TMP_PATH = '/tmp'
NODE_FAILED_EXIT = 3  # The pod entry's (k8s/node.py) exit code of a failed node.
FINAL_CHECKPOINT_S = 60
# The failure count of this pod's index, which Kubernetes sets with
# backoffLimitPerIndex: the node's restart count (folded into its seeds).
FAILURE_COUNT_ANNOTATION = 'batch.kubernetes.io/job-index-failure-count'
KUBERNETES_VERSION = '1.32.0'  # The schema version validated against.
DEFAULT_BACKOFF = {'actor': 10, 'evaluator': 10}  # Others: 3.
_QUANTITY = re.compile(
    r'^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)'
    r'(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$')
_GROUP_KEYS = ('requests', 'limits', 'nodeSelector', 'tolerations',
               'backoffLimitPerIndex', 'accelerator')
# A learner on an accelerator (IMPALA Table 1: one GPU learner fed by CPU
# actors). GKE labels a GPU node with its accelerator type and taints GPU
# node pools with nvidia.com/gpu (NoSchedule); the device plugin's resource
# is nvidia.com/gpu, set as a limit (Kubernetes takes an extended resource's
# request from its limit and refuses a different one).
ACCELERATOR_ROLES = ('learner',)
GPU_RESOURCE = 'nvidia.com/gpu'
GKE_ACCELERATOR_LABEL = 'cloud.google.com/gke-accelerator'
_ACCELERATOR_TYPE = re.compile(r'^nvidia-[a-z0-9-]{1,50}$')
# Requests and limits of each role when `--resources` does not set them.
# From the nodes' resident memory on a local run (benchmarks/soak.py:
# 240-470 MB each on CartPole) with room for Atari's frames and networks;
# the replay's need grows with replay_capacity, so a LASER run sets its own
# (docs/gke.md#3-resources-file). A request above a default limit raises
# that limit to the request.
_ACTING = {'requests': {'cpu': '1', 'memory': '1Gi'},
           'limits': {'cpu': '2', 'memory': '2Gi'}}
_BOOKKEEPING = {'requests': {'cpu': '250m', 'memory': '512Mi'},
                'limits': {'cpu': '1', 'memory': '1Gi'}}
DEFAULT_RESOURCES = {
    'learner': {'requests': {'cpu': '2', 'memory': '4Gi'},
                'limits': {'cpu': '8', 'memory': '8Gi'}},
    'replay': {'requests': {'cpu': '1', 'memory': '2Gi'},
               'limits': {'cpu': '2', 'memory': '8Gi'}},
    'actor': _ACTING,
    'evaluator': _ACTING,
    'counter': _BOOKKEEPING,
    'coordinator': _BOOKKEEPING,
    'pbt': _BOOKKEEPING,
}
# The image's unprivileged user (Dockerfile); fsGroup makes the run's volume
# writable to it.
RUN_AS_USER = 10001
_DIGEST = re.compile(r'@sha256:[0-9a-f]{64}$')
_SUFFIXES = {'m': 1e-3, 'k': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15,
             'E': 1e18, 'Ki': 2.**10, 'Mi': 2.**20, 'Gi': 2.**30,
             'Ti': 2.**40, 'Pi': 2.**50, 'Ei': 2.**60}


def is_quantity(value: Any) -> bool:
  return isinstance(value, (int, float)) or bool(
      _QUANTITY.match(str(value)))


def quantity_value(value: Any) -> float:
  """A Kubernetes quantity as a number (cores or bytes): '500m' -> 0.5."""
  text = str(value)
  match = _QUANTITY.match(text)
  if not match:
    raise ValueError(f'{value!r} is not a Kubernetes quantity.')
  suffix = match.group(3) or ''
  if suffix in _SUFFIXES:
    return float(text[:-len(suffix)]) * _SUFFIXES[suffix]
  return float(text)


def has_digest(image: str) -> bool:
  """Whether an image reference pins its content (`...@sha256:<64 hex>`)."""
  return bool(_DIGEST.search(image))


def container_resources(resources: Mapping[str, Any], group: str
                        ) -> Dict[str, Dict[str, str]]:
  """Requests and limits of one group: the role's defaults, then the
  file's `default`, then its role's entry, key by key; a limit below its
  request is raised to it where the limit is a default."""
  role = lifecycle.role_of(group)
  out = {k: dict(v) for k, v in DEFAULT_RESOURCES[role].items()}
  given = {'requests': {}, 'limits': {}}
  for spec in (resources['groups'].get('default') or {},
               resources['groups'].get(role) or {}):
    for kind in ('requests', 'limits'):
      for name, value in (spec.get(kind) or {}).items():
        out[kind][name] = given[kind][name] = str(value)
  for name, request in out['requests'].items():
    limit = out['limits'].get(name)
    if limit is not None and quantity_value(limit) < quantity_value(request):
      if name in given['limits']:
        raise ValueError(
            f'resources.groups.{role}: limits.{name}={limit!r} is below '
            f'requests.{name}={request!r}.')
      out['limits'][name] = request
  return out


def validate_resources(resources: Mapping[str, Any]) -> Dict[str, Any]:
  """Checks a `--resources` document; returns it with defaults filled.

  {groups: {<role or 'default'>: {requests: {cpu: .., memory: ..},
  limits: {..}, nodeSelector: {..}, tolerations: [..],
  backoffLimitPerIndex: N}}, storage: {storageClassName: .., size: ..}}.
  Raises ValueError naming the bad entry.
  """
  resources = dict(resources or {})
  unknown = set(resources) - {'groups', 'storage'}
  if unknown:
    raise ValueError(f'resources: unknown key(s) {sorted(unknown)}; expected '
                     'groups and storage.')
  groups = dict(resources.get('groups') or {})
  for role, spec in groups.items():
    if role not in lifecycle.ROLES + ('default',):
      raise ValueError(f'resources.groups.{role}: unknown group; expected one '
                       f'of {list(lifecycle.ROLES) + ["default"]}.')
    if not isinstance(spec, dict):
      raise ValueError(f'resources.groups.{role}: expected a mapping, got '
                       f'{spec!r}.')
    bad = set(spec) - set(_GROUP_KEYS)
    if bad:
      raise ValueError(f'resources.groups.{role}: unknown key(s) '
                       f'{sorted(bad)}; expected some of {list(_GROUP_KEYS)}.')
    for kind in ('requests', 'limits'):
      for name, value in (spec.get(kind) or {}).items():
        if not is_quantity(value):
          raise ValueError(f'resources.groups.{role}.{kind}.{name}={value!r} '
                           'is not a Kubernetes quantity (e.g. 500m, 2, 4Gi).')
    if 'accelerator' in spec:
      _validate_accelerator(role, spec['accelerator'])
    limit = spec.get('backoffLimitPerIndex')
    if limit is not None and (not isinstance(limit, int) or limit < 0):
      raise ValueError(f'resources.groups.{role}.backoffLimitPerIndex='
                       f'{limit!r}: expected an integer >= 0.')
  storage = dict(resources.get('storage') or {})
  bad = set(storage) - {'storageClassName', 'size'}
  if bad:
    raise ValueError(f'resources.storage: unknown key(s) {sorted(bad)}; '
                     'expected storageClassName and size.')
  storage.setdefault('size', '100Gi')
  if not is_quantity(storage['size']):
    raise ValueError(f'resources.storage.size={storage["size"]!r} is not a '
                     'Kubernetes quantity.')
  return {'groups': groups, 'storage': storage}


def _validate_accelerator(role: str, accelerator: Any) -> None:
  """`accelerator: {type: nvidia-tesla-t4, count: 1}`, for a learner."""
  where = f'resources.groups.{role}.accelerator'
  if role not in ACCELERATOR_ROLES:
    raise ValueError(f'{where}: only the {"/".join(ACCELERATOR_ROLES)} group '
                     'takes an accelerator (actors and the other nodes run '
                     'on CPU).')
  if not isinstance(accelerator, dict) or set(accelerator) != {'type',
                                                               'count'}:
    raise ValueError(f'{where}={accelerator!r}: expected a mapping with type '
                     '(a GKE accelerator, e.g. nvidia-tesla-t4, nvidia-l4) '
                     'and count (GPUs per pod).')
  if not _ACCELERATOR_TYPE.match(str(accelerator['type'])):
    raise ValueError(f'{where}.type={accelerator["type"]!r}: expected a GKE '
                     'accelerator type such as nvidia-tesla-t4 or nvidia-l4.')
  count = accelerator['count']
  if not isinstance(count, int) or isinstance(count, bool) or count < 1:
    raise ValueError(f'{where}.count={count!r}: expected an integer >= 1.')


def accelerator_of(resources: Mapping[str, Any], group: str
                   ) -> Optional[Dict[str, Any]]:
  """The group's `accelerator` entry, or None (CPU)."""
  return (resources.get('groups', {}).get(lifecycle.role_of(group)) or
          {}).get('accelerator')


def _group_spec(resources: Mapping[str, Any], group: str) -> Dict[str, Any]:
  groups = resources.get('groups', {})
  spec = dict(groups.get('default') or {})
  spec.update(groups.get(lifecycle.role_of(group)) or {})
  return spec


def run_selector(run_name: str) -> str:
  """The label selector of one run's objects: the app name and the instance
  both, so no other application's objects that share an instance label are
  ever listed, replaced or deleted."""
  return f'{NAME_LABEL}={APP_NAME},{RUN_LABEL}={run_name}'


def _labels(run_name: str, group: Optional[str] = None) -> Dict[str, str]:
  labels = {NAME_LABEL: APP_NAME, RUN_LABEL: run_name}
  if group is not None:
    labels[GROUP_LABEL] = naming.dns_label(group)
  return labels


def _extra_ports(group: str, group_sizes: Mapping[str, int]) -> List[int]:
  """Ports a group's pods open beside Launchpad's: a learner group of
  K > 1 synchronous replicas, their collective's."""
  if lifecycle.role_of(group) == 'learner' and group_sizes[group] > 1:
    return [naming.COLLECTIVE_PORT]
  return []


def render(run_name: str, image: str, namespace: str,
           group_sizes: Mapping[str, int], node_args: Sequence[str],
           resources: Mapping[str, Any], attempt: str,
           termination_notice_s: int, gpu_image: Optional[str] = None
           ) -> List[Dict[str, Any]]:
  """Every object of the run, in the order `kubectl apply` should take them.

  `node_args`: the program's flags for every pod (the logdir on the shared
  volume among them); `attempt` names this launch's stop marker. A group
  with an `accelerator` (the learner's) runs `gpu_image` (the Dockerfile's
  `gpu` target) on a GKE node of that type; every other group `image`.
  """
  naming.validate_run_name(run_name)
  if not naming.is_dns_label(namespace):
    raise ValueError(f'namespace={namespace!r} is not a DNS label.')
  if not image or any(c.isspace() for c in image):
    raise ValueError(f'image={image!r}: expected an image reference such as '
                     'REGION-docker.pkg.dev/PROJECT/REPO/acme-impala:TAG.')
  resources = validate_resources(resources)
  accelerated = sorted(g for g in group_sizes if accelerator_of(resources, g))
  if accelerated and (not gpu_image or any(c.isspace() for c in gpu_image)):
    raise ValueError(
        f'gpu_image={gpu_image!r}: the groups {accelerated} have an '
        'accelerator and need the GPU image (docker build --target gpu; '
        'docs/gke.md).')
  addresses = naming.address_map(run_name, group_sizes)
  run_labels = _labels(run_name)
  claim = naming.dns_label(f'{run_name}-logdir')
  objects: List[Dict[str, Any]] = []
  storage = resources['storage']
  pvc_spec: Dict[str, Any] = {
      'accessModes': ['ReadWriteMany'],
      'resources': {'requests': {'storage': str(storage['size'])}}}
  if storage.get('storageClassName'):
    pvc_spec['storageClassName'] = storage['storageClassName']
  objects.append({
      'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
      'metadata': {'name': claim, 'namespace': namespace,
                   'labels': run_labels},
      'spec': pvc_spec})
  objects.append({
      'apiVersion': 'networking.k8s.io/v1', 'kind': 'NetworkPolicy',
      'metadata': {'name': naming.dns_label(f'{run_name}-internal'),
                   'namespace': namespace, 'labels': run_labels},
      'spec': {
          'podSelector': {'matchLabels': dict(run_labels)},
          'policyTypes': ['Ingress'],
          'ingress': [{
              'from': [{'podSelector': {'matchLabels': dict(run_labels)}}],
              'ports': [{'protocol': 'TCP', 'port': p}
                        for p in sorted({naming.PORT} | {
                            port for g in group_sizes
                            for port in _extra_ports(g, group_sizes)})]}]}})
  grace = int(termination_notice_s) + FINAL_CHECKPOINT_S
  for group, size in group_sizes.items():
    job = naming.job_name(run_name, group, size)
    labels = _labels(run_name, group)
    spec = _group_spec(resources, group)
    objects.append({
        'apiVersion': 'v1', 'kind': 'Service',
        'metadata': {'name': job, 'namespace': namespace, 'labels': labels},
        'spec': {
            'clusterIP': 'None',
            # DNS names exist while a pod starts, before it is ready.
            'publishNotReadyAddresses': True,
            'selector': dict(labels),
            'ports': [{'name': 'lp', 'port': naming.PORT,
                       'targetPort': naming.PORT, 'protocol': 'TCP'}] + [
                           {'name': 'collective', 'port': port,
                            'targetPort': port, 'protocol': 'TCP'}
                           for port in _extra_ports(group, group_sizes)]}})
    accelerator = accelerator_of(resources, group)
    container = {
        'name': CONTAINER,
        'image': gpu_image if accelerator else image,
        # A tag can move; with a digest Always costs one manifest check.
        'imagePullPolicy': 'Always',
        'command': ['python', '-m', 'acme_impala.launch.k8s.node',
                    f'--group={group}', f'--run_name={run_name}',
                    f'--attempt={attempt}',
                    f'--lp_termination_notice_secs={int(termination_notice_s)}'
                    ] + list(node_args),
        'ports': [{'name': 'lp', 'containerPort': naming.PORT,
                   'protocol': 'TCP'}] + [
                       {'name': 'collective', 'containerPort': port,
                        'protocol': 'TCP'}
                       for port in _extra_ports(group, group_sizes)],
        'env': [
            {'name': 'PYTHONUNBUFFERED', 'value': '1'},
            {'name': 'TF_CPP_MIN_LOG_LEVEL', 'value': '1'},
            # The root filesystem is read-only: everything a library
            # writes outside the logdir goes to the /tmp volume.
            {'name': 'HOME', 'value': TMP_PATH},
            {'name': 'TMPDIR', 'value': TMP_PATH},
            {'name': 'MPLCONFIGDIR', 'value': TMP_PATH},
            {'name': 'PYTHONDONTWRITEBYTECODE', 'value': '1'},
            {'name': 'ACME_IMPALA_RESTART_COUNT', 'valueFrom': {'fieldRef': {
                'fieldPath':
                    f"metadata.annotations['{FAILURE_COUNT_ANNOTATION}']"}}},
        ],
        'volumeMounts': [{'name': VOLUME, 'mountPath': MOUNT_PATH},
                         {'name': TMP_VOLUME, 'mountPath': TMP_PATH}],
        'terminationMessagePolicy': 'FallbackToLogsOnError',
        'resources': container_resources(resources, group),
        # The Pod Security Standards' restricted profile.
        'securityContext': {
            'runAsNonRoot': True,
            'runAsUser': RUN_AS_USER,
            'runAsGroup': RUN_AS_USER,
            'allowPrivilegeEscalation': False,
            'readOnlyRootFilesystem': True,
            'capabilities': {'drop': ['ALL']},
            'seccompProfile': {'type': 'RuntimeDefault'},
        },
    }
    pod_spec: Dict[str, Any] = {
        'subdomain': job,
        'restartPolicy': 'Never',
        'terminationGracePeriodSeconds': grace,
        # No node talks to the Kubernetes API; courier runs what it is
        # sent, so a mounted token would be one request away.
        'automountServiceAccountToken': False,
        'securityContext': {
            'runAsNonRoot': True,
            'runAsUser': RUN_AS_USER,
            'runAsGroup': RUN_AS_USER,
            'fsGroup': RUN_AS_USER,
            'seccompProfile': {'type': 'RuntimeDefault'},
        },
        'containers': [container],
        'volumes': [{'name': VOLUME,
                     'persistentVolumeClaim': {'claimName': claim}},
                    {'name': TMP_VOLUME, 'emptyDir': {}}],
    }
    if spec.get('nodeSelector'):
      pod_spec['nodeSelector'] = {k: str(v)
                                  for k, v in spec['nodeSelector'].items()}
    if spec.get('tolerations'):
      pod_spec['tolerations'] = list(spec['tolerations'])
    if accelerator:
      count = str(accelerator['count'])
      container['resources']['limits'][GPU_RESOURCE] = count
      container['resources']['requests'][GPU_RESOURCE] = count
      pod_spec.setdefault('nodeSelector', {})[GKE_ACCELERATOR_LABEL] = str(
          accelerator['type'])
      gpu_taint = {'key': GPU_RESOURCE, 'operator': 'Exists',
                   'effect': 'NoSchedule'}
      if gpu_taint not in pod_spec.get('tolerations', []):
        pod_spec.setdefault('tolerations', []).append(gpu_taint)
    objects.append({
        'apiVersion': 'batch/v1', 'kind': 'Job',
        'metadata': {'name': job, 'namespace': namespace, 'labels': labels,
                     'annotations': {'acme-impala/attempt': attempt,
                                     'acme-impala/addresses':
                                         ','.join(addresses[group][:3]) +
                                         (',...' if size > 3 else '')}},
        'spec': {
            'completionMode': 'Indexed',
            'completions': size,
            'parallelism': size,
            'backoffLimitPerIndex': int(spec.get(
                'backoffLimitPerIndex',
                DEFAULT_BACKOFF.get(lifecycle.role_of(group), 3))),
            'podReplacementPolicy': 'Failed',
            'podFailurePolicy': {'rules': [
                {'action': 'Ignore',
                 'onPodConditions': [{'type': 'DisruptionTarget',
                                      'status': 'True'}]},
                {'action': 'FailJob',
                 'onExitCodes': {'containerName': CONTAINER,
                                 'operator': 'In',
                                 'values': [NODE_FAILED_EXIT]}},
            ]},
            'template': {'metadata': {'labels': dict(labels)},
                         'spec': pod_spec}}})
  return objects


def schema_errors(objects: Sequence[Mapping[str, Any]],
                  version: str = KUBERNETES_VERSION) -> List[str]:
  """`kubernetes-validate` in strict mode (misspelt fields fail)."""
  import kubernetes_validate  # pylint: disable=g-import-not-at-top
  errors = []
  for obj in objects:
    try:
      kubernetes_validate.validate(dict(obj), version, strict=True)
    except kubernetes_validate.ValidationError as error:
      where = '.'.join(str(p) for p in error.path)
      errors.append(f'{obj.get("kind")}/{obj["metadata"].get("name")}: '
                    f'{where}: {error.message}')
  return errors


def lint(objects: Sequence[Mapping[str, Any]],
         group_sizes: Mapping[str, int],
         termination_notice_s: float) -> List[str]:
  """Cross-field rules no schema checks; returns the problems found."""
  problems = []
  by_kind: Dict[str, Dict[str, Mapping[str, Any]]] = {}
  for obj in objects:
    name = obj['metadata']['name']
    kind = obj['kind']
    if not naming.is_dns_label(name):
      problems.append(f'{kind}/{name}: not a DNS-1123 label of <= 63 chars.')
    if name in by_kind.setdefault(kind, {}):
      problems.append(f'{kind}/{name}: defined twice.')
    by_kind[kind][name] = obj
  services = by_kind.get('Service', {})
  claims = by_kind.get('PersistentVolumeClaim', {})
  jobs = by_kind.get('Job', {})
  policies = by_kind.get('NetworkPolicy', {})
  groups_seen = set()
  for name, job in jobs.items():
    spec = job['spec']
    template = spec['template']
    pod = template['spec']
    labels = template['metadata'].get('labels', {})
    command = pod['containers'][0].get('command', [])
    group = next((a.split('=', 1)[1] for a in command
                  if a.startswith('--group=')), None)
    groups_seen.add(group)
    want = group_sizes.get(group)
    if want is None:
      problems.append(f'Job/{name}: --group={group!r} is not a program group.')
    elif not spec.get('completions') == spec.get('parallelism') == want:
      problems.append(f'Job/{name}: completions={spec.get("completions")} '
                      f'parallelism={spec.get("parallelism")}, but group '
                      f'{group!r} has {want} node(s).')
    if spec.get('completionMode') != 'Indexed':
      problems.append(f'Job/{name}: completionMode must be Indexed.')
    if pod.get('restartPolicy') != 'Never':
      problems.append(f'Job/{name}: restartPolicy must be Never (the '
                      'podFailurePolicy needs it).')
    if len(f'{name}-{max(spec.get("completions", 1) - 1, 0)}') > 63:
      problems.append(f'Job/{name}: pod hostnames exceed 63 characters.')
    service = services.get(pod.get('subdomain'))
    if service is None:
      problems.append(f'Job/{name}: subdomain {pod.get("subdomain")!r} names '
                      'no Service of the run.')
    else:
      selector = service['spec'].get('selector', {})
      if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f'Service/{service["metadata"]["name"]}: selector '
                        f'{selector} is not a subset of Job/{name}\'s pod '
                        f'labels {labels}.')
      if service['spec'].get('clusterIP') != 'None':
        problems.append(f'Service/{service["metadata"]["name"]}: not '
                        'headless (clusterIP: None).')
      container_ports = {p['containerPort'] for c in pod['containers']
                         for p in c.get('ports', [])}
      for port in service['spec'].get('ports', []):
        if port.get('targetPort', port['port']) not in container_ports:
          problems.append(f'Service/{service["metadata"]["name"]}: port '
                          f'{port} is no container port of Job/{name}.')
      if naming.PORT not in container_ports:
        problems.append(f'Job/{name}: the nodes\' port {naming.PORT} is not '
                        'a container port.')
    grace = pod.get('terminationGracePeriodSeconds', 30)
    if grace <= termination_notice_s:
      problems.append(f'Job/{name}: terminationGracePeriodSeconds={grace} is '
                      f'not longer than the termination notice '
                      f'({termination_notice_s} s).')
    containers = {c['name'] for c in pod['containers']}
    for rule in spec.get('podFailurePolicy', {}).get('rules', []):
      target = rule.get('onExitCodes', {}).get('containerName')
      if target is not None and target not in containers:
        problems.append(f'Job/{name}: podFailurePolicy names container '
                        f'{target!r}, not one of {sorted(containers)}.')
    for volume in pod.get('volumes', []):
      claim = volume.get('persistentVolumeClaim', {}).get('claimName')
      if claim is not None and claim not in claims:
        problems.append(f'Job/{name}: volume claim {claim!r} is not defined.')
    for container in pod['containers']:
      for kind in ('requests', 'limits'):
        for resource, value in container.get('resources', {}).get(
            kind, {}).items():
          if not is_quantity(value):
            problems.append(f'Job/{name}: {kind}.{resource}={value!r} is not '
                            'a quantity.')
    problems += _hardening_problems(name, pod)
    if not any(all(labels.get(k) == v for k, v in
                   p['spec']['podSelector'].get('matchLabels', {}).items())
               for p in policies.values()):
      problems.append(f'Job/{name}: no NetworkPolicy selects its pods.')
  missing = set(group_sizes) - groups_seen
  if missing:
    problems.append(f'groups without a Job: {sorted(missing)}.')
  return problems


# The restricted profile's fields, and ours, each with the value required.
_POD_SECURITY = {'runAsNonRoot': True,
                 'seccompProfile': {'type': 'RuntimeDefault'}}
_CONTAINER_SECURITY = {'runAsNonRoot': True,
                       'allowPrivilegeEscalation': False,
                       'readOnlyRootFilesystem': True,
                       'capabilities': {'drop': ['ALL']}}


def _hardening_problems(name: str, pod: Mapping[str, Any]) -> List[str]:
  """One problem per missing or weakened hardening field of a pod."""
  problems = []
  if pod.get('automountServiceAccountToken') is not False:
    problems.append(f'Job/{name}: automountServiceAccountToken must be '
                    'false.')
  context = pod.get('securityContext', {})
  for key, want in _POD_SECURITY.items():
    if context.get(key) != want:
      problems.append(f'Job/{name}: securityContext.{key} must be {want!r}, '
                      f'not {context.get(key)!r}.')
  if not context.get('runAsUser'):
    problems.append(f'Job/{name}: securityContext.runAsUser must be a '
                    'non-zero user id.')
  volumes = {v['name'] for v in pod.get('volumes', [])}
  for container in pod.get('containers', []):
    where = f'Job/{name}: container {container.get("name")!r}'
    c_context = container.get('securityContext', {})
    for key, want in _CONTAINER_SECURITY.items():
      if c_context.get(key) != want:
        problems.append(f'{where}: securityContext.{key} must be {want!r}, '
                        f'not {c_context.get(key)!r}.')
    if c_context.get('runAsUser') == 0:
      problems.append(f'{where}: securityContext.runAsUser must not be 0.')
    if container.get('imagePullPolicy') not in ('Always', 'IfNotPresent'):
      problems.append(f'{where}: imagePullPolicy is not set.')
    limits = container.get('resources', {}).get('limits', {})
    requests = container.get('resources', {}).get('requests', {})
    for resource in ('cpu', 'memory'):
      for kind, values in (('requests', requests), ('limits', limits)):
        if resource not in values:
          problems.append(f'{where}: no {kind}.{resource}.')
      if resource in limits and resource in requests and is_quantity(
          limits[resource]) and is_quantity(requests[resource]) and (
              quantity_value(limits[resource]) <
              quantity_value(requests[resource])):
        problems.append(f'{where}: limits.{resource} is below its request.')
    mounts = {m['mountPath'] for m in container.get('volumeMounts', [])
              if m.get('name') in volumes}
    for path in (MOUNT_PATH, TMP_PATH):
      if path not in mounts:
        problems.append(f'{where}: no writable volume at {path} (the root '
                        'filesystem is read-only).')
  return problems
