"""hardware: the CPU's model, flags and usable cores, read from Linux."""

from acme_impala.host import hardware


def _cpuinfo(tmp_path, model, flags):
  path = tmp_path / 'cpuinfo'
  # Two processors, as /proc/cpuinfo lists every one; the first is read.
  path.write_text(''.join(
      f'processor\t: {i}\nvendor_id\t: X\nmodel name\t: {model}\n'
      f'flags\t\t: {flags}\n\n' for i in range(2)))
  return str(path)


def test_describe_cpu_names_the_model_and_what_it_has_and_lacks(tmp_path):
  amd = _cpuinfo(tmp_path, 'AMD EPYC', 'fpu sse2 avx avx2 fma bmi2')
  assert hardware.cpu_model(amd) == 'AMD EPYC'
  assert hardware.cpu_flags(amd) == {'fpu', 'sse2', 'avx', 'avx2', 'fma',
                                     'bmi2'}
  cores = hardware.usable_cores()
  assert hardware.describe_cpu(amd) == (
      f'AMD EPYC, {cores} cores, has avx2 fma; lacks avx512f avx512_vnni '
      'avx512_bf16 amx_tile amx_bf16')
  intel = _cpuinfo(tmp_path, 'Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz',
                   ' '.join(hardware.RELEVANT_FLAGS))
  assert hardware.describe_cpu(intel) == (
      f'Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, {cores} cores, has '
      + ' '.join(hardware.RELEVANT_FLAGS))


def test_unreadable_cpuinfo_says_unknown(tmp_path):
  missing = str(tmp_path / 'missing')
  assert hardware.cpu_model(missing) == 'unknown CPU'
  assert hardware.cpu_flags(missing) == frozenset()
  assert hardware.describe_cpu(missing).endswith('flags unknown')
  assert hardware.describe_cpu(missing).startswith('unknown CPU, ')


def test_this_machines_cpu_is_read():
  """On Linux the real /proc/cpuinfo gives a model and flags (every x86-64
  CPU reports sse2)."""
  assert hardware.cpu_model() != 'unknown CPU'
  assert 'sse2' in hardware.cpu_flags()


def test_usable_cores_reads_the_cgroup_quota(monkeypatch):
  """A pod limited to 1.5 CPUs on a bigger node gets 2 EnvPool threads, not
  one per core of the node."""
  files = {'/sys/fs/cgroup/cpu.max': '150000 100000\n'}

  def read(path):
    if path not in files:
      raise OSError(path)
    return files[path]
  monkeypatch.setattr(hardware, '_read', read)
  monkeypatch.setattr(hardware.os, 'sched_getaffinity',
                      lambda pid: set(range(64)))
  assert hardware.usable_cores() == 2
  files['/sys/fs/cgroup/cpu.max'] = 'max 100000\n'
  assert hardware.usable_cores() == 64
  files = {'/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '300000\n',
           '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n'}
  assert hardware.usable_cores() == 3
