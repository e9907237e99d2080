"""benchmarks/laser_efficiency.py: its files, read back and added to.

The script defines absl flags that other benchmarks define too: it runs in
its own interpreter here (no programs are started)."""

import subprocess
import sys
import textwrap

import docs_commands

_CODE = textwrap.dedent('''
    import sys
    sys.argv = ['laser_efficiency.py', '--suite=table2',
                '--env=MinAtar/Breakout-v1', '--max_actor_steps=1000',
                '--outdir=' + sys.argv[1]]
    sys.path.insert(0, 'benchmarks')
    import laser_efficiency as le
    from absl import app
    le.FLAGS(sys.argv)
    points = lambda top: [(100. * i, float(i % top)) for i in range(1, 11)]
    results = {'V-trace f=0': [('0', '.', points(3)), ('1', '.', points(4))],
               '1-step IS f=0': [('0', '.', points(5))]}
    made = {('V-trace f=0', '0'): ('aaaaaaa', 'CPU A'),
            ('V-trace f=0', '1'): ('bbbbbbb', 'CPU A'),
            ('1-step IS f=0', '0'): ('ccccccc', 'CPU B')}
    le._report(results, made, quiet=True)

    # Read back: every point, each run's own commit and CPU.
    read, read_made, _, _ = le._read_files(le._path('curves'))
    assert read == results, read
    assert read_made == made, read_made
    with open(le._path('curves')) as f:
      first = f.readline()
    assert 'aaaaaaa, bbbbbbb on CPU A' in first and 'ccccccc on CPU B' in first

    # Runs to be made again are left out; the others are kept.
    kept, kept_made, _ = le._earlier_runs({('1-step IS f=0', '0'),
                                           ('V-trace f=0', '1')})
    assert kept == {'V-trace f=0': results['V-trace f=0'][:1]}, kept
    assert set(kept_made) == {('V-trace f=0', '0')}, kept_made

    # ... and runs of another budget are not mixed with them.
    le.FLAGS.max_actor_steps = 2000
    try:
      le._earlier_runs(set())
    except app.UsageError as e:
      assert 'runs of 1000 env steps' in str(e), e
    else:
      raise AssertionError('runs of another budget were merged')
    print('ok')
''')


def test_files_read_back_and_later_runs_keep_the_others(tmp_path):
  proc = subprocess.run([sys.executable, '-c', _CODE, str(tmp_path)],
                        cwd=docs_commands.ROOT, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=120)
  assert proc.returncode == 0 and proc.stdout.endswith('ok\n'), proc.stdout
