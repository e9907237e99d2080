"""acme_impala: IMPALA and LASER on Acme, Reverb and Launchpad."""
import setuptools

setuptools.setup(
    name='acme_impala',
    version='0.1.0',
    description='IMPALA and LASER agents for the DeepMind RL stack (Acme, Reverb, Launchpad).',
    packages=setuptools.find_packages(include=['acme_impala', 'acme_impala.*'])
    + ['acme_impala.configs'],
    # The presets live in the top-level configs/ of a checkout (one file per
    # preset, as DeepMind projects keep them); an install carries them inside
    # the package, where acme_impala.agent.presets looks second.
    package_dir={'acme_impala.configs': 'configs'},
    python_requires='>=3.10,<3.11',
    # Exact pins live in requirements.txt (the verified stack); dm-acme is installed with
    # --no-deps because its sdist pins older versions than that stack.
    install_requires=[
        'dm-launchpad==0.5.2', 'dm-reverb==0.7.0', 'tensorflow==2.8.4',
        'dm-sonnet==2.0.1', 'trfl==1.2.0', 'dm-env==1.6', 'gymnasium==1.4.0',
        'numpy==1.23.5',
    ],
)
