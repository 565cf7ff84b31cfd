"""Stand-in for get-pip.py in ansible-test's venvs (make sanity puts it in ansible-test's cache).

ansible-test bootstraps pip in each test venv from a script it downloads from ci-files.testing.ansible.com; where only
the package index is reachable, this does the same with the interpreter's own ensurepip, then installs the packages
ansible-test asks for (pip at its pinned version) from the index.
"""

import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")  # get-pip.py's own options, not pip's

subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
subprocess.run(
    [sys.executable, "-m", "pip", "install", "-q", *(arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY)],
    check=True,
)
